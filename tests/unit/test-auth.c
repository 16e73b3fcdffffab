/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for tokens, tenants and quotas (src/daemon/store/auth.c) on a real
 * SQLite store in a temporary directory, with the event bus attached. */
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth.h"
#include "events.h"
#include "json-cleanup.h"
#include "store.h"
#include "util.h"

static char dir[PATH_MAX];
static char db[PATH_MAX + 16];
static struct store *st;

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-auth-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(db, sizeof(db), "%s/airlock.db", dir);
	struct al_error err = {0};
	if (store_open(db, &st, &err) < 0 || events_init(st, &err) < 0 || auth_init(st, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.message);
		return -1;
	}
	return 0;
}

static void close_all(void)
{
	auth_shutdown();
	events_shutdown();
	store_close(st);
	st = NULL;
}

static int teardown(void **state)
{
	(void)state;
	if (st)
		close_all();
	return rm_rf(dir);
}

/* The events of a type, oldest first. */
static json_t *events_of(const char *type)
{
	struct event_filter f = {.type_prefix = type};
	json_t *arr = NULL;
	uint64_t last;
	struct al_error err = {0};
	assert_int_equal(events_read(&f, 0, 0, &arr, &last, &err), 0);
	return arr;
}

static void test_error_codes(void **state)
{
	(void)state;
	assert_int_equal(al_error_http_status(AL_ERR_QUOTA), 429);
	assert_string_equal(al_error_code_name(AL_ERR_QUOTA), "quota_exceeded");
	assert_int_equal(al_error_http_status(AL_ERR_UNAUTHORIZED), 401);
	assert_string_equal(al_error_code_name(AL_ERR_UNAUTHORIZED), "unauthorized");
	assert_int_equal(al_error_http_status(AL_ERR_FORBIDDEN), 403);
	assert_string_equal(al_error_code_name(AL_ERR_FORBIDDEN), "forbidden");
	/* The existing codes keep their values. */
	assert_int_equal(AL_ERR_GUEST, 11);
	assert_int_equal(al_error_http_status(AL_ERR_GUEST), 502);
}

static void test_tenant_names(void **state)
{
	(void)state;
	const char *good[] = {"a",      "default",
	                      "team-a", "t_1",
	                      "0abc",   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc"}; /* 63 */
	const char *bad[] = {
	    "",       "-a",     "_a",
	    "Team",   "team a", "team/a",
	    "team.a", "tëam",   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd"}; /* 64 */
	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		assert_true(tenant_name_valid(good[i]));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_false(tenant_name_valid(bad[i]));
}

static bool b64url(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void bearer(char *buf, size_t size, const char *scheme, const char *secret)
{
	assert_int_equal(snprintf_ok(buf, size, "%s %s", scheme, secret), 0);
}

static void test_token_lifecycle(void **state)
{
	(void)state;
	struct token_info t;
	char secret[TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	assert_int_equal(auth_token_create("team-a", "ci", &t, secret, &err), 0);

	assert_int_equal(strlen(secret), TOKEN_SECRET_LEN);
	assert_int_equal(strncmp(secret, "alk_", 4), 0);
	for (size_t i = 4; i < TOKEN_SECRET_LEN; i++)
		assert_true(b64url(secret[i]));
	assert_int_equal(strlen(t.id), TOKEN_ID_LEN);
	assert_int_equal(strncmp(t.id, "tok-", 4), 0);
	for (size_t i = 4; i < TOKEN_ID_LEN; i++)
		assert_non_null(strchr("0123456789abcdef", t.id[i]));
	assert_string_equal(t.tenant, "team-a");
	assert_string_equal(t.description, "ci");
	assert_true(t.created_ms > 0);
	assert_int_equal(t.revoked_ms, 0);

	char header[300], tenant[TENANT_NAME_MAX + 1] = "";
	static const char *const schemes[] = {"Bearer", "bearer", "BEARER", "bEaReR"};
	for (size_t i = 0; i < ARRAY_SIZE(schemes); i++) {
		bearer(header, sizeof(header), schemes[i], secret);
		memset(tenant, 0, sizeof(tenant));
		assert_int_equal(auth_token_verify(header, tenant, NULL, &err), 0);
		assert_string_equal(tenant, "team-a");
	}

	/* A token that was never issued (right shape) is rejected. */
	char forged[TOKEN_SECRET_LEN + 1];
	memcpy(forged, secret, sizeof(forged));
	forged[10] = forged[10] == 'A' ? 'B' : 'A';
	bearer(header, sizeof(header), "Bearer", forged);
	strlcpy_al(tenant, "unchanged", sizeof(tenant));
	enum auth_failure failure = AUTH_FAILURE__COUNT;
	assert_int_equal(auth_token_verify(header, tenant, &failure, &err), -EACCES);
	assert_int_equal(err.code, AL_ERR_UNAUTHORIZED);
	assert_string_equal(tenant, "unchanged");
	assert_string_equal(auth_failure_name(failure), "unknown");
	char unknown_msg[AL_ERROR_MSG_MAX];
	strlcpy_al(unknown_msg, err.message, sizeof(unknown_msg));

	struct token_info *list = NULL;
	size_t n = 0;
	assert_int_equal(auth_token_list(NULL, &list, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].id, t.id);
	assert_int_equal(list[0].revoked_ms, 0);
	free(list);

	assert_int_equal(auth_token_revoke(t.id, &err), 0);
	bearer(header, sizeof(header), "Bearer", secret);
	err = (struct al_error){0};
	assert_int_equal(auth_token_verify(header, tenant, &failure, &err), -EACCES);
	assert_int_equal(err.code, AL_ERR_UNAUTHORIZED);
	/* SECURITY: the client cannot tell revoked from unknown; the reason (for the event) can. */
	assert_string_equal(err.message, unknown_msg);
	assert_string_equal(auth_failure_name(failure), "revoked");
	/* Failures are the API server's to record (rate-limited): verify emits nothing. */
	cleanup_json json_t *fails = events_of("auth.failure");
	assert_int_equal(json_array_size(fails), 0);

	err = (struct al_error){0};
	assert_int_equal(auth_token_revoke(t.id, &err), -ENOENT);
	assert_int_equal(err.code, AL_ERR_NOT_FOUND);
	assert_int_equal(auth_token_revoke("tok-0000000000000000", &err), -ENOENT);
	assert_int_equal(auth_token_revoke("", &err), -ENOENT);

	assert_int_equal(auth_token_list(NULL, &list, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_true(list[0].revoked_ms >= list[0].created_ms);
	free(list);

	cleanup_json json_t *created = events_of("token.created");
	assert_int_equal(json_array_size(created), 1);
	json_t *c0 = json_array_get(created, 0);
	assert_string_equal(json_string_value(json_object_get(c0, "tenant")), "team-a");
	assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "data"), "id")), t.id);
	cleanup_json json_t *revoked = events_of("token.revoked");
	assert_int_equal(json_array_size(revoked), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(revoked, 0), "tenant")), "team-a");
}

static void test_tokens_by_tenant(void **state)
{
	(void)state;
	struct token_info t[3];
	char s[3][TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	assert_int_equal(auth_token_create("team-a", "one", &t[0], s[0], &err), 0);
	assert_int_equal(auth_token_create("team-b", NULL, &t[1], s[1], &err), 0);
	assert_int_equal(auth_token_create("team-a", "two", &t[2], s[2], &err), 0);
	assert_string_not_equal(s[0], s[1]);
	assert_string_not_equal(s[0], s[2]);
	assert_string_not_equal(t[0].id, t[2].id);
	assert_string_equal(t[1].description, "");

	struct token_info *list = NULL;
	size_t n = 0;
	assert_int_equal(auth_token_list("team-a", &list, &n, &err), 0);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(list[i].tenant, "team-a");
	free(list);
	assert_int_equal(auth_token_list("nobody", &list, &n, &err), 0);
	assert_int_equal(n, 0);
	free(list);

	/* Each token maps to its own tenant; revoking one leaves the others. */
	char header[300], tenant[TENANT_NAME_MAX + 1];
	assert_int_equal(auth_token_revoke(t[0].id, &err), 0);
	bearer(header, sizeof(header), "Bearer", s[1]);
	assert_int_equal(auth_token_verify(header, tenant, NULL, &err), 0);
	assert_string_equal(tenant, "team-b");
	bearer(header, sizeof(header), "Bearer", s[2]);
	assert_int_equal(auth_token_verify(header, tenant, NULL, &err), 0);
	assert_string_equal(tenant, "team-a");
}

static void test_create_rejects(void **state)
{
	(void)state;
	struct token_info t;
	char secret[TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	assert_int_equal(auth_token_create("Team-A", "x", &t, secret, &err), -EINVAL);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	assert_int_equal(auth_token_create(NULL, "x", &t, secret, &err), -EINVAL);
	char desc[TOKEN_DESCRIPTION_MAX + 2];
	memset(desc, 'd', sizeof(desc) - 1);
	desc[sizeof(desc) - 1] = '\0';
	assert_int_equal(auth_token_create("team-a", desc, &t, secret, &err), -EINVAL);
	assert_int_equal(auth_token_create("team-a", "bad\nline", &t, secret, &err), -EINVAL);
	assert_int_equal(auth_token_create("team-a", "\xff\xfe", &t, secret, &err), -EINVAL);
	desc[TOKEN_DESCRIPTION_MAX] = '\0';
	assert_int_equal(auth_token_create("team-a", desc, &t, secret, &err), 0);
	assert_string_equal(t.description, desc);
}

static void test_malformed_headers(void **state)
{
	(void)state;
	struct token_info t;
	char secret[TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	assert_int_equal(auth_token_create("team-a", "", &t, secret, &err), 0);

	char two_spaces[128], no_scheme[128], basic[128], tab[128], trailing[128], leading[128], bad_char[128],
	    long_value[AUTH_HEADER_MAX + 16], nul_scheme[128], quoted[128];
	bearer(two_spaces, sizeof(two_spaces), "Bearer ", secret);
	strlcpy_al(no_scheme, secret, sizeof(no_scheme));
	bearer(basic, sizeof(basic), "Basic", secret);
	snprintf(tab, sizeof(tab), "Bearer\t%s", secret);
	snprintf(trailing, sizeof(trailing), "Bearer %s ", secret);
	snprintf(leading, sizeof(leading), " Bearer %s", secret);
	snprintf(bad_char, sizeof(bad_char), "Bearer %s!", secret);
	snprintf(nul_scheme, sizeof(nul_scheme), "Bearerx %s", secret);
	snprintf(quoted, sizeof(quoted), "Bearer \"%s\"", secret);
	snprintf(long_value, sizeof(long_value), "Bearer %s", secret);
	size_t len = strlen(long_value);
	memset(long_value + len, 'A', sizeof(long_value) - len - 1);
	long_value[sizeof(long_value) - 1] = '\0';

	const struct {
		const char *value;
		const char *reason;
	} cases[] = {
	    {NULL, "missing"},           {"", "missing"},
	    {no_scheme, "malformed"},    {basic, "malformed"},
	    {two_spaces, "malformed"},   {tab, "malformed"},
	    {trailing, "malformed"},     {leading, "malformed"},
	    {bad_char, "malformed"},     {nul_scheme, "malformed"},
	    {quoted, "malformed"},       {long_value, "malformed"},
	    {"Bearer", "malformed"},     {"Bearer ", "malformed"},
	    {"Bearer =", "malformed"},   {"Bearer alk_é", "malformed"},
	    {"Bearer a=b", "malformed"}, {"Bearer alk_abc==", "unknown"}, /* valid b64token syntax, never issued */
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char tenant[TENANT_NAME_MAX + 1] = "unchanged";
		err = (struct al_error){0};
		enum auth_failure failure = AUTH_FAILURE__COUNT;
		assert_int_equal(auth_token_verify(cases[i].value, tenant, &failure, &err), -EACCES);
		assert_int_equal(err.code, AL_ERR_UNAUTHORIZED);
		assert_true(err.message[0] != '\0');
		assert_string_equal(tenant, "unchanged");
		assert_string_equal(auth_failure_name(failure), cases[i].reason);
	}
}

static void test_header_parse(void **state)
{
	(void)state;
	char tok[AUTH_HEADER_MAX + 1];
	assert_int_equal(auth_header_parse("Bearer abc", tok, sizeof(tok)), 0);
	assert_string_equal(tok, "abc");
	assert_int_equal(auth_header_parse("bearer a-b.c_d~e+f/g==", tok, sizeof(tok)), 0);
	assert_string_equal(tok, "a-b.c_d~e+f/g==");
	/* Too small a buffer is -E2BIG, never a truncated token. */
	strlcpy_al(tok, "unchanged", sizeof(tok));
	assert_int_equal(auth_header_parse("Bearer abcdef", tok, 6), -E2BIG);
	assert_string_equal(tok, "unchanged");
	assert_int_equal(auth_header_parse("Bearer abcde", tok, 6), 0);
	assert_int_equal(auth_header_parse(NULL, tok, sizeof(tok)), -EINVAL);

	/* Exactly AUTH_HEADER_MAX bytes is accepted, one more is not. */
	char v[AUTH_HEADER_MAX + 2];
	memcpy(v, "Bearer ", 7);
	memset(v + 7, 'x', sizeof(v) - 8);
	v[AUTH_HEADER_MAX] = '\0';
	assert_int_equal(auth_header_parse(v, tok, sizeof(tok)), 0);
	assert_int_equal(strlen(tok), AUTH_HEADER_MAX - 7);
	v[AUTH_HEADER_MAX] = 'x';
	v[AUTH_HEADER_MAX + 1] = '\0';
	assert_int_equal(auth_header_parse(v, tok, sizeof(tok)), -E2BIG);
}

/* Does any file in dir contain needle? */
static bool dir_contains(const char *needle)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[PATH_MAX + 300];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		cleanup_free char *buf = NULL;
		size_t len = 0;
		if (read_file_limited(path, 64u << 20, &buf, &len) < 0)
			continue;
		found = memmem(buf, len, needle, strlen(needle)) != NULL;
	}
	closedir(d);
	return found;
}

static void test_secret_never_stored(void **state)
{
	(void)state;
	struct token_info t[4];
	char s[4][TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	for (int i = 0; i < 4; i++)
		assert_int_equal(auth_token_create("team-a", "scan me", &t[i], s[i], &err), 0);
	char header[300], tenant[TENANT_NAME_MAX + 1];
	bearer(header, sizeof(header), "Bearer", s[0]);
	assert_int_equal(auth_token_verify(header, tenant, NULL, &err), 0);
	/* Scan the database, its WAL and shm while open and after closing. */
	for (int pass = 0; pass < 2; pass++) {
		assert_true(dir_contains(t[3].id)); /* the scan does see the rows */
		for (int i = 0; i < 4; i++) {
			assert_false(dir_contains(s[i]));
			assert_false(dir_contains(s[i] + 4)); /* nor the random part alone */
		}
		if (pass == 0)
			close_all();
	}
}

static void test_quota_store(void **state)
{
	(void)state;
	struct tenant_quota q = {9, 9, 9};
	struct al_error err = {0};
	assert_int_equal(auth_quota_get("team-a", &q, &err), 0);
	assert_int_equal(q.max_sandboxes, 0);
	assert_int_equal(q.max_vcpus, 0);
	assert_int_equal(q.max_memory_mib, 0);

	struct tenant_quota set = {2, 8, 4096};
	assert_int_equal(auth_quota_set("team-a", &set, &err), 0);
	assert_int_equal(auth_quota_get("team-a", &q, &err), 0);
	assert_memory_equal(&q, &set, sizeof(q));
	set = (struct tenant_quota){0, QUOTA_MAX, 0};
	assert_int_equal(auth_quota_set("team-a", &set, &err), 0);
	assert_int_equal(auth_quota_get("team-a", &q, &err), 0);
	assert_memory_equal(&q, &set, sizeof(q));
	assert_int_equal(auth_quota_get("team-b", &q, &err), 0);
	assert_int_equal(q.max_vcpus, 0);

	set.max_memory_mib = QUOTA_MAX + 1;
	assert_int_equal(auth_quota_set("team-a", &set, &err), -EINVAL);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "max_memory_mib"));
	set.max_memory_mib = 0;
	assert_int_equal(auth_quota_set("Team-A", &set, &err), -EINVAL);
	assert_int_equal(auth_quota_get("../x", &q, &err), -EINVAL);

	/* Persisted: a reopened store has the quotas. */
	close_all();
	assert_int_equal(store_open(db, &st, &err), 0);
	assert_int_equal(events_init(st, &err), 0);
	assert_int_equal(auth_init(st, &err), 0);
	assert_int_equal(auth_quota_get("team-a", &q, &err), 0);
	assert_int_equal(q.max_vcpus, QUOTA_MAX);
}

static void test_quota_check(void **state)
{
	(void)state;
	struct al_error err = {0};
	struct tenant_quota unlimited = {0};
	struct tenant_usage huge = {UINT_MAX, UINT_MAX, UINT_MAX};
	assert_int_equal(tenant_quota_check("t", &unlimited, &huge, UINT_MAX, UINT_MAX, &err), 0);

	struct tenant_quota q = {.max_sandboxes = 2};
	struct tenant_usage u = {.sandboxes = 1, .vcpus = 100, .memory_mib = 100000};
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 16, 16384, &err), 0);
	u.sandboxes = 2;
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 1, 128, &err), -EDQUOT);
	assert_int_equal(err.code, AL_ERR_QUOTA);
	assert_string_equal(err.message, "tenant team-a may run at most 2 sandboxes and has 2; delete one or raise "
	                                 "the quota with PUT /v1/tenants/team-a");
	u.sandboxes = 5; /* over already (quota lowered): still refused */
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 1, 128, &err), -EDQUOT);

	q = (struct tenant_quota){.max_vcpus = 8};
	u = (struct tenant_usage){.sandboxes = 3, .vcpus = 6};
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 2, 128, &err), 0); /* exactly at the limit */
	err = (struct al_error){0};
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 3, 128, &err), -EDQUOT);
	assert_non_null(strstr(err.message, "at most 8 vCPUs"));
	assert_non_null(strstr(err.message, "uses 6"));
	assert_non_null(strstr(err.message, "PUT /v1/tenants/team-a"));

	q = (struct tenant_quota){.max_memory_mib = 1024};
	u = (struct tenant_usage){.memory_mib = 768};
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 1, 256, &err), 0);
	assert_int_equal(tenant_quota_check("team-a", &q, &u, 1, 257, &err), -EDQUOT);
	assert_non_null(strstr(err.message, "1024 MiB"));
	assert_non_null(strstr(err.message, "768 MiB"));

	/* Sums do not wrap around. */
	q = (struct tenant_quota){QUOTA_MAX, QUOTA_MAX, QUOTA_MAX};
	u = (struct tenant_usage){0, UINT_MAX, 0};
	assert_int_equal(tenant_quota_check("t", &q, &u, 1, 1, &err), -EDQUOT);
	u = (struct tenant_usage){0, 1, 0};
	assert_int_equal(tenant_quota_check("t", &q, &u, UINT_MAX, 1, &err), -EDQUOT);
	u = (struct tenant_usage){UINT_MAX, 0, 0};
	assert_int_equal(tenant_quota_check("t", &q, &u, 1, 1, &err), -EDQUOT);
}

static void test_json(void **state)
{
	(void)state;
	struct token_info t = {.created_ms = 1796061662123ull};
	strlcpy_al(t.id, "tok-0123456789abcdef", sizeof(t.id));
	strlcpy_al(t.tenant, "team-a", sizeof(t.tenant));
	strlcpy_al(t.description, "ci", sizeof(t.description));
	cleanup_json json_t *j = token_info_to_json(&t);
	assert_int_equal(json_object_size(j), 5);
	assert_string_equal(json_string_value(json_object_get(j, "id")), "tok-0123456789abcdef");
	assert_string_equal(json_string_value(json_object_get(j, "tenant")), "team-a");
	assert_string_equal(json_string_value(json_object_get(j, "description")), "ci");
	assert_string_equal(json_string_value(json_object_get(j, "created_at")), "2026-11-30T18:01:02.123Z");
	assert_true(json_is_null(json_object_get(j, "revoked_at")));
	assert_null(json_object_get(j, "token"));
	assert_null(json_object_get(j, "hash"));
	t.revoked_ms = t.created_ms + 1000;
	cleanup_json json_t *r = token_info_to_json(&t);
	assert_string_equal(json_string_value(json_object_get(r, "revoked_at")), "2026-11-30T18:01:03.123Z");

	struct tenant_quota q = {2, 8, 4096};
	struct tenant_usage u = {1, 2, 512};
	cleanup_json json_t *tj = tenant_to_json("team-a", &q, &u);
	cleanup_free char *text = json_dumps(tj, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(text, "{\"name\":\"team-a\",\"quotas\":{\"max_memory_mib\":4096,\"max_sandboxes\":2,"
	                          "\"max_snapshot_mib\":0,\"max_vcpus\":8},\"usage\":{\"memory_mib\":512,"
	                          "\"sandboxes\":1,\"vcpus\":2}}");
	cleanup_json json_t *tn = tenant_to_json("team-a", &q, NULL);
	assert_null(json_object_get(tn, "usage"));
}

static void test_after_shutdown(void **state)
{
	(void)state;
	auth_shutdown();
	struct token_info t;
	char secret[TOKEN_SECRET_LEN + 1];
	struct al_error err = {0};
	assert_int_equal(auth_token_create("team-a", "", &t, secret, &err), -ESHUTDOWN);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	char tenant[TENANT_NAME_MAX + 1];
	err = (struct al_error){0};
	assert_int_equal(auth_token_verify("Bearer alk_x", tenant, NULL, &err), -ESHUTDOWN);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE); /* a 503, not a 401 */
	struct tenant_quota q;
	assert_int_equal(auth_quota_get("team-a", &q, &err), -ESHUTDOWN);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_error_codes),
	    T(test_tenant_names),
	    T(test_token_lifecycle),
	    T(test_tokens_by_tenant),
	    T(test_create_rejects),
	    T(test_malformed_headers),
	    T(test_header_parse),
	    T(test_secret_never_stored),
	    T(test_quota_store),
	    T(test_quota_check),
	    T(test_json),
	    T(test_after_shutdown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
