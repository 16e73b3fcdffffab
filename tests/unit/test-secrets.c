/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the secret store (src/daemon/store/secrets.c): AES-256-GCM round
 * trips and every refusal, the host key file's checks, the request parser's
 * validation table, and the store and bindings on a real SQLite database in
 * a temporary directory. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "events.h"
#include "json-cleanup.h"
#include "api-request.h"
#include "secrets.h"
#include "store.h"
#include "util.h"

#define VALUE "s3cr3t-Value-4711-xyzzy"

static char dir[PATH_MAX];
static struct store *st;

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-secrets-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	cleanup_free char *db = xasprintf("%s/airlock.db", dir);
	struct al_error err = {0};
	if (store_open(db, &st, &err) < 0 || events_init(st, &err) < 0 || secrets_init(st, dir, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	secrets_shutdown();
	events_shutdown();
	store_close(st);
	st = NULL;
	return rm_rf(dir);
}

static void fixed_key(uint8_t key[SECRET_KEY_BYTES], uint8_t seed)
{
	for (size_t i = 0; i < SECRET_KEY_BYTES; i++)
		key[i] = (uint8_t)(seed + i);
}

static bool contains(const void *hay, size_t n, const char *needle)
{
	return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* ------------------------------------------------------------ crypto */

static void test_round_trip(void **state)
{
	(void)state;
	uint8_t key[SECRET_KEY_BYTES];
	fixed_key(key, 1);
	uint8_t *a = NULL, *b = NULL;
	size_t alen, blen;
	assert_int_equal(secret_encrypt(key, "team-a", "gh", VALUE, strlen(VALUE), &a, &alen), 0);
	assert_int_equal(alen, 1 + SECRET_NONCE_BYTES + strlen(VALUE) + SECRET_TAG_BYTES);
	assert_int_equal(a[0], SECRET_BLOB_VERSION);
	assert_false(contains(a, alen, VALUE));
	/* A fresh nonce per write: the same value never encrypts the same. */
	assert_int_equal(secret_encrypt(key, "team-a", "gh", VALUE, strlen(VALUE), &b, &blen), 0);
	assert_int_equal(alen, blen);
	assert_memory_not_equal(a + 1, b + 1, SECRET_NONCE_BYTES);
	assert_memory_not_equal(a, b, alen);
	char *plain = NULL;
	size_t plen = 0;
	assert_int_equal(secret_decrypt(key, "team-a", "gh", a, alen, &plain, &plen), 0);
	assert_int_equal(plen, strlen(VALUE));
	assert_string_equal(plain, VALUE);
	secret_wipe_free(plain, plen);
	assert_int_equal(secret_decrypt(key, "team-a", "gh", b, blen, &plain, &plen), 0);
	secret_wipe_free(plain, plen);
	/* The longest value, and one byte. */
	char big[POLICY_SECRET_VALUE_MAX];
	memset(big, 'x', sizeof(big));
	free(b);
	assert_int_equal(secret_encrypt(key, "t", "n", big, sizeof(big), &b, &blen), 0);
	assert_int_equal(secret_decrypt(key, "t", "n", b, blen, &plain, &plen), 0);
	assert_int_equal(plen, sizeof(big));
	secret_wipe_free(plain, plen);
	free(b);
	assert_int_equal(secret_encrypt(key, "t", "n", big, sizeof(big) + 1, &b, &blen), -E2BIG);
	free(a);
}

static void test_refusals(void **state)
{
	(void)state;
	uint8_t key[SECRET_KEY_BYTES], other[SECRET_KEY_BYTES];
	fixed_key(key, 1);
	fixed_key(other, 2);
	cleanup_free uint8_t *blob = NULL;
	size_t len;
	assert_int_equal(secret_encrypt(key, "team-a", "gh", VALUE, strlen(VALUE), &blob, &len), 0);
	char *plain = NULL;
	size_t plen;
	/* Another key, another tenant, another name (the AAD), and names that
	 * only differ in where tenant ends and name begins. */
	assert_int_equal(secret_decrypt(other, "team-a", "gh", blob, len, &plain, &plen), -EBADMSG);
	assert_int_equal(secret_decrypt(key, "team-b", "gh", blob, len, &plain, &plen), -EBADMSG);
	assert_int_equal(secret_decrypt(key, "team-a", "gh2", blob, len, &plain, &plen), -EBADMSG);
	assert_int_equal(secret_decrypt(key, "team-ag", "h", blob, len, &plain, &plen), -EBADMSG);
	/* Every single-bit change anywhere: version, nonce, ciphertext, tag. */
	for (size_t i = 0; i < len; i++) {
		blob[i] ^= 0x01;
		assert_int_equal(secret_decrypt(key, "team-a", "gh", blob, len, &plain, &plen), -EBADMSG);
		blob[i] ^= 0x01;
	}
	/* Truncated or padded. */
	assert_int_equal(secret_decrypt(key, "team-a", "gh", blob, len - 1, &plain, &plen), -EBADMSG);
	assert_int_equal(secret_decrypt(key, "team-a", "gh", blob, 1 + SECRET_NONCE_BYTES, &plain, &plen), -EBADMSG);
	assert_int_equal(secret_decrypt(key, "team-a", "gh", blob, 0, &plain, &plen), -EBADMSG);
	cleanup_free uint8_t *longer = xmalloc(len + 1);
	memcpy(longer, blob, len);
	longer[len] = 0;
	assert_int_equal(secret_decrypt(key, "team-a", "gh", longer, len + 1, &plain, &plen), -EBADMSG);
	/* Still intact. */
	assert_int_equal(secret_decrypt(key, "team-a", "gh", blob, len, &plain, &plen), 0);
	secret_wipe_free(plain, plen);
}

/* ------------------------------------------------------------ the key file */

static int load(const char *path, uint8_t key[SECRET_KEY_BYTES], struct al_error *err)
{
	*err = (struct al_error){0};
	return secret_key_load(path, key, err);
}

static void test_key_file(void **state)
{
	(void)state;
	struct al_error err;
	uint8_t k1[SECRET_KEY_BYTES], k2[SECRET_KEY_BYTES];
	cleanup_free char *path = xasprintf("%s/secrets.key", dir);
	/* setup created it: 0600, ours, 32 bytes, and it loads the same twice. */
	struct stat s;
	assert_int_equal(stat(path, &s), 0);
	assert_true(S_ISREG(s.st_mode));
	assert_int_equal(s.st_mode & 07777, 0600);
	assert_int_equal(s.st_uid, geteuid());
	assert_int_equal(s.st_size, SECRET_KEY_BYTES);
	assert_int_equal(load(path, k1, &err), 0);
	assert_int_equal(load(path, k2, &err), 0);
	assert_memory_equal(k1, k2, SECRET_KEY_BYTES);

	/* A new path: a new random key, never the same. */
	cleanup_free char *p2 = xasprintf("%s/other.key", dir);
	assert_int_equal(load(p2, k2, &err), 0);
	assert_memory_not_equal(k1, k2, SECRET_KEY_BYTES);
	cleanup_free char *tmp = xasprintf("%s.tmp", p2);
	assert_int_equal(access(tmp, F_OK), -1);

	/* Modes wider than 0600 are refused (and say what to do); 0400 is fine. */
	static const mode_t bad[] = {0640, 0604, 0644, 0660, 0700, 0610, 04600, 0666};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(chmod(p2, bad[i]), 0);
		assert_int_equal(load(p2, k2, &err), -EPERM);
		assert_non_null(strstr(err.message, "chmod 600"));
	}
	assert_int_equal(chmod(p2, 0400), 0);
	assert_int_equal(load(p2, k2, &err), 0);
	assert_int_equal(chmod(p2, 0600), 0);

	/* Another owner. */
	if (geteuid() == 0) {
		assert_int_equal(chown(p2, 65534, 65534), 0);
		assert_int_equal(load(p2, k2, &err), -EPERM);
		assert_non_null(strstr(err.message, "uid 65534"));
		assert_int_equal(chown(p2, 0, 0), 0);
		assert_int_equal(load(p2, k2, &err), 0);
	}

	/* The wrong size, a symlink, a directory. */
	assert_int_equal(truncate(p2, 31), 0);
	assert_int_equal(load(p2, k2, &err), -EPERM);
	assert_non_null(strstr(err.message, "damaged"));
	cleanup_free char *link = xasprintf("%s/link.key", dir);
	assert_int_equal(symlink(path, link), 0);
	assert_true(load(link, k2, &err) < 0);
	cleanup_free char *d = xasprintf("%s/dir.key", dir);
	assert_int_equal(mkdir(d, 0700), 0);
	assert_true(load(d, k2, &err) < 0);
	explicit_bzero(k1, sizeof(k1));
	explicit_bzero(k2, sizeof(k2));
}

/* ------------------------------------------------------------ request parser */

struct parse_case {
	const char *body;
	const char *error; /* NULL: accepted */
};

static void test_request_table(void **state)
{
	(void)state;
	char big_value[POLICY_SECRET_VALUE_MAX + 64];
	snprintf(big_value, sizeof(big_value), "{\"name\":\"a\",\"hosts\":[\"x.example\"],\"value\":\"%0*d\"}",
	         POLICY_SECRET_VALUE_MAX + 1, 0);
	char max_value[POLICY_SECRET_VALUE_MAX + 64];
	snprintf(max_value, sizeof(max_value), "{\"name\":\"a\",\"hosts\":[\"x.example\"],\"value\":\"%0*d\"}",
	         POLICY_SECRET_VALUE_MAX, 0);
	const struct parse_case cases[] = {
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}", NULL},
	    {"{\"name\":\"gh.token_1-x\",\"value\":\"" VALUE "\",\"hosts\":[\"*.github.com\",\"api.github.com:8443\"],"
	     "\"paths\":[\"/v1/\",\"/repos\"],\"methods\":[\"get\",\"POST\",\"GET\"],\"header\":\"Authorization\","
	     "\"format\":\"Bearer {value}\",\"tenant\":\"team-a\"}",
	     NULL},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"X-Api-Key\"}", NULL},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":null,\"format\":null,"
	     "\"paths\":null,\"methods\":null}",
	     NULL},
	    {max_value, NULL},
	    {"{\"name\":\"gh\",\"value\":\"tab\\there\",\"hosts\":[\"a.example\"]}", NULL},
	    /* JSON */
	    {"", "not valid JSON"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\x01\"", "not valid JSON"},
	    {"[]", "JSON object"},
	    {"{\"name\":\"gh\",\"name\":\"x\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "not valid JSON"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"extra\":1}", "unknown field"},
	    /* name */
	    {"{\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name: required"},
	    {"{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name:"},
	    {"{\"name\":\".gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name:"},
	    {"{\"name\":\"a/b\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name:"},
	    {"{\"name\":\"\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name:"},
	    {"{\"name\":\"0123456789012345678901234567890123456789012345678901234567890123\",\"value\":\"" VALUE
	     "\",\"hosts\":[\"a.example\"]}",
	     "name:"},
	    {"{\"name\":7,\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", "name:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"tenant\":\"A B\"}", "tenant:"},
	    /* value */
	    {"{\"name\":\"gh\",\"hosts\":[\"a.example\"]}", "value: required"},
	    {"{\"name\":\"gh\",\"value\":\"\",\"hosts\":[\"a.example\"]}", "value: must be 1 to"},
	    {"{\"name\":\"gh\",\"value\":5,\"hosts\":[\"a.example\"]}", "value: required"},
	    {big_value, "value: must be 1 to"},
	    {"{\"name\":\"gh\",\"value\":\" " VALUE "\",\"hosts\":[\"a.example\"]}", "space or tab"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\\t\",\"hosts\":[\"a.example\"]}", "space or tab"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"X-K\","
	     "\"format\":\"Bearer {value} \"}",
	     "format:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\\r\\nX-Evil: 1\",\"hosts\":[\"a.example\"]}",
	     "control characters"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\\n\",\"hosts\":[\"a.example\"]}", "control characters"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\\u0000\",\"hosts\":[\"a.example\"]}", "not valid JSON"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\\u007f\",\"hosts\":[\"a.example\"]}", "control characters"},
	    /* hosts */
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\"}", "hosts: required"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[]}", "hosts: required"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":\"a.example\"}", "hosts: required"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[1]}", "hosts[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"*\"]}", "hosts[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"*.com\"]}", "hosts[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\",\"a b\"]}", "hosts[1]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"203.0.113.7\"]}", "host names"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"[2001:db8::1]\"]}", "host names"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"203.0.113.0/24\"]}", "host names"},
	    /* paths */
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"paths\":[\"v1\"]}", "paths[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"paths\":[\"/a b\"]}", "paths[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"paths\":[\"\"]}", "paths[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"paths\":\"/v1/\"}", "paths:"},
	    /* methods */
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"methods\":[\"TRACE\"]}",
	     "methods[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"methods\":[\"CONNECT\"]}",
	     "methods[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"methods\":[\"GETX\"]}",
	     "methods[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"methods\":\"GET\"}", "methods:"},
	    /* header and format */
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"Bad Header\"}",
	     "header:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"\"}", "header:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"Host\"}",
	     "frames or routes"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"content-length\"}",
	     "frames or routes"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"Transfer-Encoding\"}",
	     "frames or routes"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"format\":\"Bearer {value}\"}",
	     "format: needs header"},
	    /* headers (placeholder mode, issue 17) */
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"headers\":[]}", "headers:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"headers\":[\"Host\"]}",
	     "frames or routes"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"headers\":[\"a b\"]}", "headers[0]"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"headers\":[\"X\",\"x\"]}", "twice"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE
	     "\",\"hosts\":[\"a.example\"],\"headers\":[\"A\",\"B\",\"C\",\"D\",\"E\",\"F\",\"G\",\"H\",\"I\"]}",
	     "headers:"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"],\"header\":\"A\",\"headers\":[\"A\"]}",
	     "only without header"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE
	     "\",\"hosts\":[\"a.example\"],\"header\":\"A\",\"format\":\"Bearer\"}",
	     "exactly once"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE
	     "\",\"hosts\":[\"a.example\"],\"header\":\"A\",\"format\":\"{value}{value}\"}",
	     "exactly once"},
	    {"{\"name\":\"gh\",\"value\":\"" VALUE
	     "\",\"hosts\":[\"a.example\"],\"header\":\"A\",\"format\":\"{value}\\r\\nX: y\"}",
	     "exactly once"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct secret_request r = {0};
		struct al_error err = {0};
		int rc = secret_request_parse(cases[i].body, strlen(cases[i].body), &r, &err);
		if (!cases[i].error) {
			if (rc != 0)
				fail_msg("case %zu: refused: %s", i, err.message);
			assert_non_null(r.spec_json);
			assert_false(strstr(r.spec_json, VALUE));
			secret_request_release(&r);
			continue;
		}
		if (rc == 0)
			fail_msg("case %zu: accepted, expected \"%s\"", i, cases[i].error);
		assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
		if (!strstr(err.message, cases[i].error))
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.message, cases[i].error);
		/* SECURITY: the value is never in a message, not even a piece of it. */
		if (strstr(err.message, "s3cr3t") || strstr(err.message, "xyzzy"))
			fail_msg("case %zu: the message quotes the value: %s", i, err.message);
	}
}

static void test_request_canonical(void **state)
{
	(void)state;
	const char *body = "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"],"
	                   "\"methods\":[\"post\",\"GET\",\"get\"],\"header\":\"Authorization\"}";
	struct secret_request r = {0};
	struct al_error err = {0};
	assert_int_equal(secret_request_parse(body, strlen(body), &r, &err), 0);
	assert_string_equal(r.name, "gh");
	assert_string_equal(r.tenant, "");
	assert_string_equal(r.value, VALUE);
	assert_int_equal(r.value_len, strlen(VALUE));
	/* Methods upper case, once each, in a fixed order; format defaults with a header. */
	assert_string_equal(r.spec_json, "{\"format\":\"{value}\",\"header\":\"Authorization\",\"hosts\":[\"api.github."
	                                 "com\"],\"methods\":[\"GET\",\"POST\"],\"paths\":[]}");
	secret_request_release(&r);
	assert_null(r.value);
	body = "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}";
	assert_int_equal(secret_request_parse(body, strlen(body), &r, &err), 0);
	assert_string_equal(
	    r.spec_json,
	    "{\"format\":null,\"header\":null,\"headers\":[\"Authorization\"],\"hosts\":[\"api.github.com\"],"
	    "\"methods\":[],\"paths\":[]}");
	secret_request_release(&r);
	/* Placeholder mode: the header fields it may be replaced in (issue 17). */
	body = "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"],\"headers\":[\"X-Api-Key\","
	       "\"Cookie\"]}";
	assert_int_equal(secret_request_parse(body, strlen(body), &r, &err), 0);
	assert_non_null(strstr(r.spec_json, "\"headers\":[\"X-Api-Key\",\"Cookie\"]"));
	secret_request_release(&r);
	/* Oversize body. */
	cleanup_free char *huge = xmalloc(SECRET_BODY_MAX + 2);
	memset(huge, ' ', SECRET_BODY_MAX + 1);
	huge[SECRET_BODY_MAX + 1] = '\0';
	assert_int_equal(secret_request_parse(huge, SECRET_BODY_MAX + 1, &r, &err), -E2BIG);
	assert_int_equal(err.code, AL_ERR_TOO_LARGE);
}

static void test_names_and_grants(void **state)
{
	(void)state;
	assert_true(secret_name_valid("a"));
	assert_true(secret_name_valid("gh.token_1-x"));
	assert_true(secret_name_valid("012345678901234567890123456789012345678901234567890123456789012"));
	assert_false(secret_name_valid("0123456789012345678901234567890123456789012345678901234567890123"));
	assert_false(secret_name_valid(""));
	assert_false(secret_name_valid("-a"));
	assert_false(secret_name_valid(".a"));
	assert_false(secret_name_valid("A"));
	assert_false(secret_name_valid("a/b"));
	assert_false(secret_name_valid("a b"));

	struct al_error err = {0};
	struct kv_list env = {0}, grants = {0};
	cleanup_json json_t *ok = json_loads("{\"secrets\":{\"GH_TOKEN\":\"gh\",\"K\":\"other.key\"}}", 0, NULL);
	assert_int_equal(secret_grants_parse(ok, NULL, &grants, &err), 0);
	assert_int_equal(grants.n, 2);
	kv_list_release(&grants);
	cleanup_json json_t *none = json_loads("{\"secrets\":null}", 0, NULL);
	assert_int_equal(secret_grants_parse(none, NULL, &grants, &err), 0);
	assert_int_equal(grants.n, 0);
	static const char *const bad[] = {
	    "{\"secrets\":[\"gh\"]}",     "{\"secrets\":{\"1X\":\"gh\"}}",      "{\"secrets\":{\"X\":\"GH\"}}",
	    "{\"secrets\":{\"X\":1}}",    "{\"secrets\":{\"X\":\"a b\"}}",      "{\"secrets\":{\"X-Y\":\"gh\"}}",
	    "{\"secrets\":{\"X\":\"\"}}", "{\"secrets\":{\"X\":\"a\\u0000\"}}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cleanup_json json_t *j = json_loads(bad[i], JSON_ALLOW_NUL, NULL);
		assert_non_null(j);
		assert_true(secret_grants_parse(j, NULL, &grants, &err) < 0);
		assert_non_null(strstr(err.message, "secrets"));
	}
	/* Too many. */
	cleanup_json json_t *many = json_pack("{s:{}}", "secrets");
	for (int i = 0; i <= SANDBOX_SECRETS_MAX; i++) {
		char k[16];
		snprintf(k, sizeof(k), "V%d", i);
		json_object_set_new(json_object_get(many, "secrets"), k, json_string("gh"));
	}
	assert_true(secret_grants_parse(many, NULL, &grants, &err) < 0);
	assert_non_null(strstr(err.message, "at most"));
	/* A variable that env also sets. */
	char *k = "GH_TOKEN", *v = "x";
	env = (struct kv_list){.n = 1, .keys = &k, .values = &v};
	assert_true(secret_grants_parse(ok, &env, &grants, &err) < 0);
	assert_non_null(strstr(err.message, "also set in env"));

	/* Through the create request parser. */
	struct create_request cr;
	const char *body = "{\"env\":{\"A\":\"1\"},\"secrets\":{\"GH\":\"gh\"}}";
	assert_int_equal(create_request_parse(body, strlen(body), 0, &cr, &err), 0);
	assert_int_equal(cr.secrets.n, 1);
	assert_string_equal(cr.secrets.keys[0], "GH");
	assert_string_equal(cr.secrets.values[0], "gh");
	create_request_release(&cr);
	body = "{\"env\":{\"GH\":\"1\"},\"secrets\":{\"GH\":\"gh\"}}";
	assert_true(create_request_parse(body, strlen(body), 0, &cr, &err) < 0);
}

/* ------------------------------------------------------------ the store */

static void set_ok(const char *tenant, const char *body, bool want_created, struct secret_info *ret)
{
	struct secret_request r = {0};
	struct al_error err = {0};
	if (secret_request_parse(body, strlen(body), &r, &err) < 0)
		fail_msg("parse: %s", err.message);
	bool created = !want_created;
	if (secret_set(tenant, &r, &created, ret, &err) < 0)
		fail_msg("set: %s", err.message);
	assert_int_equal(created, want_created);
	secret_request_release(&r);
}

static json_t *events_of(const char *type)
{
	struct event_filter f = {.type_prefix = type};
	json_t *arr = NULL;
	uint64_t last;
	struct al_error err = {0};
	assert_int_equal(events_read(&f, 0, 0, &arr, &last, &err), 0);
	return arr;
}

static void assert_db_files_clean(const char *needle)
{
	static const char *const files[] = {"airlock.db", "airlock.db-wal", "airlock.db-shm", "secrets.key"};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		cleanup_free char *p = xasprintf("%s/%s", dir, files[i]);
		cleanup_free char *buf = NULL;
		size_t len = 0;
		if (read_file_limited(p, 64u << 20, &buf, &len) < 0)
			continue;
		if (contains(buf, len, needle))
			fail_msg("%s holds the value in clear", files[i]);
	}
}

static void test_store(void **state)
{
	(void)state;
	struct secret_info a, b, got;
	struct al_error err = {0};
	set_ok("team-a",
	       "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"],\"header\":\"Authorization\","
	       "\"format\":\"Bearer {value}\"}",
	       true, &a);
	assert_true(!strncmp(a.id, "sec-", 4) && strlen(a.id) == SECRET_ID_LEN);
	assert_string_equal(a.tenant, "team-a");
	assert_int_equal(a.created_ms, a.updated_ms);
	/* The same name in another tenant is another secret. */
	set_ok("team-b", "{\"name\":\"gh\",\"value\":\"other-value\",\"hosts\":[\"b.example\"]}", true, &b);
	assert_string_not_equal(a.id, b.id);
	secret_info_release(&b);
	usleep(2000);
	/* Rotation: same id and created_ms, new spec. */
	set_ok("team-a", "{\"name\":\"gh\",\"value\":\"rotated-" VALUE "\",\"hosts\":[\"*.github.com\"]}", false, &b);
	assert_string_equal(a.id, b.id);
	assert_int_equal(a.created_ms, b.created_ms);
	assert_true(b.updated_ms > a.updated_ms);
	assert_non_null(strstr(b.spec_json, "*.github.com"));
	secret_info_release(&b);

	assert_int_equal(secret_get("team-a", "gh", &got, &err), 0);
	cleanup_json json_t *j = secret_info_to_json(&got);
	cleanup_free char *text = json_dumps(j, JSON_COMPACT);
	assert_false(strstr(text, VALUE));
	assert_non_null(strstr(text, "\"hosts\":[\"*.github.com\"]"));
	assert_non_null(strstr(text, "\"header\":null"));
	assert_null(json_object_get(j, "value"));
	secret_info_release(&got);
	assert_int_equal(secret_get("team-c", "gh", &got, &err), -ENOENT);
	assert_int_equal(err.code, AL_ERR_NOT_FOUND);
	assert_int_equal(secret_get("team-a", "Bad", &got, &err), -EINVAL);

	struct secret_info *v = NULL;
	size_t n = 0;
	assert_int_equal(secret_list(NULL, &v, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(v[0].tenant, "team-a");
	assert_string_equal(v[1].tenant, "team-b");
	for (size_t i = 0; i < n; i++)
		secret_info_release(&v[i]);
	free(v);
	assert_int_equal(secret_list("team-b", &v, &n, &err), 0);
	assert_int_equal(n, 1);
	secret_info_release(&v[0]);
	free(v);

	/* Events name the secret, never hold the value. */
	cleanup_json json_t *ev = events_of("secret.");
	assert_int_equal(json_array_size(ev), 3);
	cleanup_free char *evtext = json_dumps(ev, JSON_COMPACT);
	assert_false(strstr(evtext, "s3cr3t"));
	json_t *first = json_array_get(ev, 0);
	assert_string_equal(json_string_value(json_object_get(first, "type")), "secret.set");
	assert_string_equal(json_string_value(json_object_get(first, "tenant")), "team-a");
	assert_string_equal(json_string_value(json_object_get(json_object_get(first, "data"), "name")), "gh");
	assert_true(json_is_true(json_object_get(json_object_get(first, "data"), "created")));
	assert_true(json_is_false(json_object_get(json_object_get(json_array_get(ev, 2), "data"), "created")));

	/* The database (and its WAL) hold only ciphertext. */
	assert_db_files_clean(VALUE);
	assert_db_files_clean("other-value");

	assert_int_equal(secret_delete("team-a", "gh", NULL, &err), 0);
	assert_int_equal(secret_delete("team-a", "gh", NULL, &err), -ENOENT);
	assert_int_equal(secret_get("team-a", "gh", &got, &err), -ENOENT);
	cleanup_json json_t *ev2 = events_of("secret.deleted");
	assert_int_equal(json_array_size(ev2), 1);
	secret_info_release(&a);
}

static void test_bindings(void **state)
{
	(void)state;
	struct secret_info a;
	struct al_error err = {0};
	set_ok("team-a",
	       "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"],\"paths\":[\"/v1/\"],"
	       "\"header\":\"Authorization\",\"format\":\"Bearer {value}\"}",
	       true, &a);
	secret_info_release(&a);
	set_ok("team-a", "{\"name\":\"k2\",\"value\":\"second\",\"hosts\":[\"b.example\"]}", true, &a);
	secret_info_release(&a);

	char *keys[] = {"GH_TOKEN", "K2"}, *vals[] = {"gh", "k2"};
	struct kv_list grants = {.n = 2, .keys = keys, .values = vals};
	cleanup_free char *b1 = NULL, *b2 = NULL;
	assert_int_equal(secret_bindings_grant("team-a", &grants, &b1, &err), 0);
	assert_int_equal(secret_bindings_grant("team-a", &grants, &b2, &err), 0);
	assert_false(strstr(b1, VALUE));
	/* Unknown secret, or another tenant's: refused, naming both. */
	char *bk[] = {"X"}, *bv[] = {"nope"};
	struct kv_list badg = {.n = 1, .keys = bk, .values = bv};
	char *none = NULL;
	assert_true(secret_bindings_grant("team-a", &badg, &none, &err) < 0);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "secrets.X"));
	assert_non_null(strstr(err.message, "\"nope\""));
	assert_true(secret_bindings_grant("team-b", &grants, &none, &err) < 0);

	/* Placeholders: the right form, different per grant and per sandbox. */
	cleanup_json json_t *j1 = json_loads(b1, 0, NULL), *j2 = json_loads(b2, 0, NULL);
	assert_int_equal(json_array_size(j1), 2);
	const char *p[4];
	for (size_t i = 0; i < 2; i++) {
		p[i] = json_string_value(json_object_get(json_array_get(j1, i), "placeholder"));
		p[2 + i] = json_string_value(json_object_get(json_array_get(j2, i), "placeholder"));
	}
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(strlen(p[i]), POLICY_PLACEHOLDER_LEN);
		assert_int_equal(strncmp(p[i], "airlock-ph-", 11), 0);
		for (size_t k = 11; k < POLICY_PLACEHOLDER_LEN; k++)
			assert_non_null(strchr("0123456789abcdef", p[i][k]));
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(p[i], p[k]);
	}
	cleanup_json json_t *env = json_object();
	secret_bindings_env(b1, env);
	assert_string_equal(json_string_value(json_object_get(env, "GH_TOKEN")), p[0]);
	assert_string_equal(json_string_value(json_object_get(env, "K2")), p[1]);
	assert_true(secret_bindings_use(b1, "gh"));
	assert_false(secret_bindings_use(b1, "g"));

	/* Resolved for the gateway: values and specs. */
	json_t *msg = NULL;
	assert_int_equal(secret_bindings_resolve("team-a", b1, &msg, &err), 0);
	assert_int_equal(json_array_size(msg), 2);
	json_t *m0 = json_array_get(msg, 0);
	assert_string_equal(json_string_value(json_object_get(m0, "secret")), "gh");
	assert_string_equal(json_string_value(json_object_get(m0, "placeholder")), p[0]);
	assert_string_equal(json_string_value(json_object_get(m0, "value")), VALUE);
	assert_string_equal(json_string_value(json_object_get(m0, "header")), "Authorization");
	assert_string_equal(json_string_value(json_object_get(m0, "format")), "Bearer {value}");
	assert_string_equal(json_string_value(json_array_get(json_object_get(m0, "paths"), 0)), "/v1/");
	assert_int_equal(json_array_size(json_object_get(m0, "methods")), 0);
	assert_true(json_is_null(json_object_get(json_array_get(msg, 1), "header")));
	const char *val = json_string_value(json_object_get(m0, "value"));
	secret_json_wipe(msg);
	assert_int_equal(val[0], '\0');
	json_decref(msg);

	/* Rotated: the new value. Deleted: gone. Created again: a new secret,
	 * which the old grant does not reach. */
	set_ok("team-a", "{\"name\":\"gh\",\"value\":\"new-value\",\"hosts\":[\"api.github.com\"]}", false, &a);
	secret_info_release(&a);
	assert_int_equal(secret_bindings_resolve("team-a", b1, &msg, &err), 0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(msg, 0), "value")), "new-value");
	secret_json_wipe(msg);
	json_decref(msg);
	assert_int_equal(secret_delete("team-a", "gh", NULL, &err), 0);
	assert_int_equal(secret_bindings_resolve("team-a", b1, &msg, &err), 0);
	assert_int_equal(json_array_size(msg), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(msg, 0), "secret")), "k2");
	json_decref(msg);
	set_ok("team-a", "{\"name\":\"gh\",\"value\":\"again\",\"hosts\":[\"api.github.com\"]}", true, &a);
	secret_info_release(&a);
	assert_int_equal(secret_bindings_resolve("team-a", b1, &msg, &err), 0);
	assert_int_equal(json_array_size(msg), 1);
	json_decref(msg);
	/* Another tenant resolves nothing of it. */
	assert_int_equal(secret_bindings_resolve("team-b", b1, &msg, &err), 0);
	assert_int_equal(json_array_size(msg), 0);
	json_decref(msg);
}

static void test_wrong_key_fails_closed(void **state)
{
	(void)state;
	struct secret_info a;
	struct al_error err = {0};
	set_ok("t", "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"a.example\"]}", true, &a);
	secret_info_release(&a);
	char *keys[] = {"GH"}, *vals[] = {"gh"};
	struct kv_list grants = {.n = 1, .keys = keys, .values = vals};
	cleanup_free char *b = NULL;
	assert_int_equal(secret_bindings_grant("t", &grants, &b, &err), 0);
	/* Another host key: the store does not decrypt, and says so without a value. */
	secrets_shutdown();
	cleanup_free char *path = xasprintf("%s/%s", dir, SECRET_KEY_FILE);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(secrets_init(st, dir, &err), 0);
	json_t *msg = NULL;
	assert_true(secret_bindings_resolve("t", b, &msg, &err) < 0);
	assert_non_null(strstr(err.message, "does not decrypt"));
	/* After shutdown: unavailable, not a crash. */
	secrets_shutdown();
	assert_int_equal(secret_get("t", "gh", &a, &err), -ESHUTDOWN);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	assert_int_equal(secrets_init(st, dir, &err), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_round_trip),    T(test_refusals),          T(test_key_file),
	    T(test_request_table), T(test_request_canonical), T(test_names_and_grants),
	    T(test_store),         T(test_bindings),          T(test_wrong_key_fails_closed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
