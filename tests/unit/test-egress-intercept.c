/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for what is pure in the gateway's TLS interception (issue 6):
 * the Airlock CA and its leaf certificates (egress-ca.c: issue, cache,
 * refusals), secret bindings (egress-bindings.c: parsing, matching, path
 * safety, never a value in a message) and the policy's "tls" and "pinned"
 * (egress-policy.c). No sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "egress-bindings.h"
#include "egress-ca.h"
#include "egress-policy.h"
#include "json-cleanup.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

static char *bio_text(BIO *b)
{
	char *p = NULL;
	long n = BIO_get_mem_data(b, &p);
	char *s = xmalloc((size_t)n + 1);
	memcpy(s, p, (size_t)n);
	s[n] = '\0';
	BIO_free(b);
	return s;
}

/* A self-signed certificate (a CA when is_ca) valid from now+from_s to
 * now+to_s, as PEM text, and its key. */
static void make_cert(bool is_ca, long from_s, long to_s, char **ret_cert, char **ret_key, EVP_PKEY **ret_pkey)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	assert_non_null(key);
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), from_s);
	X509_gmtime_adj(X509_getm_notAfter(x), to_s);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"Unit Test CA", -1, -1, 0);
	X509_set_issuer_name(x, n);
	X509_set_pubkey(x, key);
	X509V3_CTX v3;
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	const char *bc = is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE";
	const char *ku = is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature";
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, bc);
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	e = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, ku);
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	*ret_cert = bio_text(b);
	b = BIO_new(BIO_s_mem());
	PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL);
	*ret_key = bio_text(b);
	X509_free(x);
	if (ret_pkey)
		*ret_pkey = key;
	else
		EVP_PKEY_free(key);
}

static struct egress_ca *ca_new(size_t cache_max, X509 **ret_cert)
{
	char *cert, *key;
	make_cert(true, -3600, 365L * 86400, &cert, &key, NULL);
	struct egress_ca *ca = NULL;
	struct al_error err = {0};
	int r = egress_ca_new(cert, strlen(cert), key, strlen(key), cache_max, &ca, &err);
	if (r < 0)
		print_error("egress_ca_new: %s\n", err.message);
	assert_int_equal(r, 0);
	if (ret_cert)
		*ret_cert = egress_ca_cert(ca);
	free(cert);
	free(key);
	return ca;
}

static bool verifies(X509 *ca_cert, X509 *leaf, const char *name, time_t at)
{
	X509_STORE *store = X509_STORE_new();
	X509_STORE_add_cert(store, ca_cert);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_STORE_CTX_init(ctx, store, leaf, NULL);
	X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set1_host(param, name, 0);
	X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
	X509_VERIFY_PARAM_set_time(param, at);
	bool ok = X509_verify_cert(ctx) == 1;
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	return ok;
}

/* ------------------------------------------------------------ the CA */

static void test_ca_refusals(void **state)
{
	(void)state;
	char *cert, *key, *cert2, *key2, *leaf_cert, *leaf_key, *old_cert, *old_key;
	make_cert(true, -3600, 86400, &cert, &key, NULL);
	make_cert(true, -3600, 86400, &cert2, &key2, NULL);
	make_cert(false, -3600, 86400, &leaf_cert, &leaf_key, NULL);
	make_cert(true, -7200, -3600, &old_cert, &old_key, NULL);
	struct {
		const char *cert, *key, *part;
	} cases[] = {
	    {"garbage", key, "no PEM certificate"},
	    {cert, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0a2V5bWF0ZXJpYWw=\n-----END PRIVATE KEY-----\n",
	     "no unencrypted PEM private key"},
	    {cert, key2, "does not match"},
	    {leaf_cert, leaf_key, "not a CA"},
	    {old_cert, old_key, "expired"},
	    {"", key, "1 to"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct egress_ca *ca = (struct egress_ca *)0x1;
		struct al_error err = {0};
		int r = egress_ca_new(cases[i].cert, strlen(cases[i].cert), cases[i].key, strlen(cases[i].key), 4, &ca,
		                      &err);
		assert_int_equal(r, -EINVAL);
		assert_ptr_equal(ca, (struct egress_ca *)0x1);
		if (!strstr(err.message, cases[i].part)) {
			print_error("case %zu: \"%s\" lacks \"%s\"\n", i, err.message, cases[i].part);
			fail();
		}
		/* SECURITY: no key material in a message. */
		assert_null(strstr(err.message, "c2VjcmV0"));
		assert_null(strstr(err.message, "PRIVATE"));
	}
	free(cert);
	free(key);
	free(cert2);
	free(key2);
	free(leaf_cert);
	free(leaf_key);
	free(old_cert);
	free(old_key);
}

static void test_leaf_issue(void **state)
{
	(void)state;
	X509 *ca_cert;
	struct egress_ca *ca = ca_new(4, &ca_cert);
	time_t now = time(NULL);
	X509 *leaf = NULL;
	EVP_PKEY *key = NULL;
	assert_int_equal(egress_ca_issue(ca, "api.example.com", now, &leaf, &key), 0);

	assert_true(verifies(ca_cert, leaf, "api.example.com", now));
	assert_false(verifies(ca_cert, leaf, "other.example.com", now));
	assert_false(verifies(ca_cert, leaf, "x.api.example.com", now));
	/* A few days, then no more; backdated for clock skew. */
	assert_true(verifies(ca_cert, leaf, "api.example.com", now + EGRESS_LEAF_VALID_S - 60));
	assert_false(verifies(ca_cert, leaf, "api.example.com", now + EGRESS_LEAF_VALID_S + 60));
	assert_true(verifies(ca_cert, leaf, "api.example.com", now - EGRESS_LEAF_BACKDATE_S + 60));

	/* SAN: exactly the name; the key: EC P-256, and it is the leaf's. */
	GENERAL_NAMES *san = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
	assert_non_null(san);
	assert_int_equal(sk_GENERAL_NAME_num(san), 1);
	GENERAL_NAME *g = sk_GENERAL_NAME_value(san, 0);
	assert_int_equal(g->type, GEN_DNS);
	assert_string_equal((const char *)ASN1_STRING_get0_data(g->d.dNSName), "api.example.com");
	GENERAL_NAMES_free(san);
	assert_int_equal(EVP_PKEY_get_base_id(key), EVP_PKEY_EC);
	char group[64] = "";
	EVP_PKEY_get_utf8_string_param(key, "group", group, sizeof(group), NULL);
	assert_string_equal(group, "prime256v1");
	assert_int_equal(X509_check_private_key(leaf, key), 1);
	assert_int_equal(X509_check_ca(leaf), 0);
	assert_true(X509_get_extended_key_usage(leaf) & XKU_SSL_SERVER);

	/* Serials are random. */
	X509 *leaf2 = NULL;
	EVP_PKEY *key2 = NULL;
	assert_int_equal(egress_ca_issue(ca, "api.example.com", now, &leaf2, &key2), 0);
	assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(leaf), X509_get0_serialNumber(leaf2)), 0);
	/* Positive, at most 16 bytes (RFC 5280: at most 20). */
	BIGNUM *serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(leaf2), NULL);
	assert_false(BN_is_negative(serial));
	assert_true(BN_num_bits(serial) <= 127 && BN_num_bits(serial) > 64);
	BN_free(serial);

	/* A name over 64 characters: no CN, still a valid SAN. */
	char longname[200];
	snprintf(longname, sizeof(longname), "%s.%s.example.com", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	         "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
	X509 *leaf3 = NULL;
	EVP_PKEY *key3 = NULL;
	assert_int_equal(egress_ca_issue(ca, longname, now, &leaf3, &key3), 0);
	assert_true(verifies(ca_cert, leaf3, longname, now));

	/* Only canonical names. */
	X509 *none = NULL;
	EVP_PKEY *nokey = NULL;
	assert_int_equal(egress_ca_issue(ca, "*.example.com", now, &none, &nokey), -EINVAL);
	assert_int_equal(egress_ca_issue(ca, "Upper.example.com", now, &none, &nokey), -EINVAL);
	assert_int_equal(egress_ca_issue(ca, "", now, &none, &nokey), -EINVAL);
	assert_int_equal(egress_ca_issue(ca, "a b.example", now, &none, &nokey), -EINVAL);
	assert_null(none);

	X509_free(leaf);
	X509_free(leaf2);
	X509_free(leaf3);
	EVP_PKEY_free(key);
	EVP_PKEY_free(key2);
	EVP_PKEY_free(key3);
	egress_ca_unref(ca);
}

static X509 *leaf_of(struct egress_ca *ca, const char *name, time_t now, bool *cached)
{
	X509 *cert = NULL;
	EVP_PKEY *key = NULL;
	assert_int_equal(egress_ca_leaf(ca, name, now, &cert, &key, cached), 0);
	EVP_PKEY_free(key);
	X509_free(cert); /* the cache keeps its reference: the pointer stays comparable */
	return cert;
}

static void test_leaf_cache(void **state)
{
	(void)state;
	struct egress_ca *ca = ca_new(2, NULL);
	time_t now = time(NULL);
	bool cached;
	X509 *a = leaf_of(ca, "a.example", now, &cached);
	assert_false(cached);
	assert_ptr_equal(leaf_of(ca, "a.example", now, &cached), a);
	assert_true(cached);
	X509 *b = leaf_of(ca, "b.example", now, &cached);
	assert_false(cached);
	assert_int_equal(egress_ca_cache_len(ca), 2);
	/* a used last: c pushes b out (least recently used). */
	assert_ptr_equal(leaf_of(ca, "a.example", now, &cached), a);
	leaf_of(ca, "c.example", now, &cached);
	assert_int_equal(egress_ca_cache_len(ca), 2);
	assert_ptr_equal(leaf_of(ca, "a.example", now, &cached), a);
	assert_true(cached);
	X509 *b2 = leaf_of(ca, "b.example", now, &cached);
	assert_false(cached);
	(void)b;
	(void)b2;
	/* Close to its end, a leaf is issued again. */
	time_t later = now + EGRESS_LEAF_VALID_S - EGRESS_LEAF_RENEW_S + 10;
	X509 *b3 = leaf_of(ca, "b.example", later, &cached);
	assert_false(cached);
	assert_ptr_equal(leaf_of(ca, "b.example", later, &cached), b3);
	assert_true(cached);
	assert_int_equal(egress_ca_cache_len(ca), 2);
	/* A reference handed out outlives the CA and its cache. */
	X509 *cert = NULL;
	EVP_PKEY *key = NULL;
	assert_int_equal(egress_ca_leaf(ca, "d.example", now, &cert, &key, NULL), 0);
	egress_ca_unref(ca);
	assert_int_equal(X509_check_private_key(cert, key), 1);
	X509_free(cert);
	EVP_PKEY_free(key);
}

static void test_ca_describe(void **state)
{
	(void)state;
	struct egress_ca *ca = ca_new(1, NULL);
	char buf[256];
	egress_ca_describe(ca, buf, sizeof(buf));
	assert_non_null(strstr(buf, "Unit Test CA"));
	assert_non_null(strstr(buf, "SHA-256 "));
	egress_ca_unref(ca);
}

/* ------------------------------------------------------------ bindings */

#define PH_A "airlock-ph-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define PH_B "airlock-ph-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define VALUE "TOPSECRET-VALUE"

static const char *const good_bindings =
    "[{\"secret\":\"api-key\",\"placeholder\":\"" PH_A "\",\"value\":\"" VALUE "\","
    "\"hosts\":[\"api.example.com\",\"*.models.test\",\"other.test:8443\"],\"paths\":[\"/v1/\"],\"methods\":[],"
    "\"header\":null,\"format\":null},"
    "{\"secret\":\"gh\",\"placeholder\":\"" PH_B "\",\"value\":\"ghp x\","
    "\"hosts\":[\"api.github.test\"],\"paths\":null,\"methods\":[\"GET\",\"HEAD\"],"
    "\"header\":\"Authorization\",\"format\":\"Bearer {value}\"}]";

static struct egress_bindings *bindings_from(const char *text)
{
	json_error_t jerr;
	cleanup_json json_t *j = json_loads(text, 0, &jerr);
	if (!j)
		print_error("bad test JSON: %s\n", jerr.text);
	assert_non_null(j);
	struct egress_bindings *b = NULL;
	struct al_error err = {0};
	int r = egress_bindings_parse(j, &b, &err);
	if (r < 0)
		print_error("bindings: %s\n", err.message);
	assert_int_equal(r, 0);
	return b;
}

static struct policy_host host_of(const char *text)
{
	struct policy_host h;
	assert_int_equal(policy_host_canonicalize((const uint8_t *)text, strlen(text), &h, NULL), 0);
	return h;
}

static enum egress_binding_verdict check(const struct egress_binding *b, const char *host, const char *method,
                                         const char *path)
{
	struct policy_host h = host_of(host);
	return egress_binding_check(b, &h, method, strlen(method), path, strlen(path));
}

static void test_bindings_parse_and_match(void **state)
{
	(void)state;
	struct egress_bindings *bs = bindings_from(good_bindings);
	assert_int_equal(egress_bindings_count(bs), 2);
	const struct egress_binding *a = egress_bindings_get(bs, 0), *g = egress_bindings_get(bs, 1);
	assert_null(egress_bindings_get(bs, 2));
	assert_string_equal(a->secret, "api-key");
	assert_null(a->header);
	assert_string_equal(g->header, "Authorization");
	assert_string_equal(g->format, "Bearer {value}");
	assert_int_equal(g->value_len, 5);
	/* Placeholder mode without "headers": Authorization only (issue 17);
	 * header mode: none. */
	assert_int_equal(a->n_headers, 1);
	assert_string_equal(a->headers[0], "Authorization");
	assert_int_equal(g->n_headers, 0);
	struct egress_bindings *hs =
	    bindings_from("[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"a.test\"],"
	                  "\"headers\":[\"X-Api-Key\",\"cookie\"]}]");
	const struct egress_binding *hb = egress_bindings_get(hs, 0);
	assert_int_equal(hb->n_headers, 2);
	assert_string_equal(hb->headers[0], "X-Api-Key");
	assert_string_equal(hb->headers[1], "cookie");
	egress_bindings_unref(hs);

	struct policy_host h = host_of("API.Example.com.");
	const char *secret = NULL;
	assert_true(egress_bindings_name_host(bs, &h, &secret));
	assert_string_equal(secret, "api-key");
	h = host_of("x.models.test");
	assert_true(egress_bindings_name_host(bs, &h, NULL));
	/* A wildcard is never its own suffix; a pattern with another port
	 * than 443 binds nothing (TLS is intercepted on 443 only). */
	h = host_of("models.test");
	assert_false(egress_bindings_name_host(bs, &h, NULL));
	h = host_of("other.test");
	assert_false(egress_bindings_name_host(bs, &h, NULL));
	h = host_of("evilapi.example.com");
	assert_false(egress_bindings_name_host(bs, &h, NULL));
	assert_false(egress_bindings_name_host(NULL, &h, NULL));

	assert_int_equal(check(a, "api.example.com", "GET", "/v1/models"), EGRESS_BINDING_APPLIES);
	assert_int_equal(check(a, "api.example.com", "DELETE", "/v1/"), EGRESS_BINDING_APPLIES);
	assert_int_equal(check(a, "api.example.com", "GET", "/v1"), EGRESS_BINDING_PATH);
	assert_int_equal(check(a, "api.example.com", "GET", "/admin"), EGRESS_BINDING_PATH);
	assert_int_equal(check(a, "www.example.com", "GET", "/v1/x"), EGRESS_BINDING_HOST);
	assert_int_equal(check(g, "api.github.test", "GET", "/anything"), EGRESS_BINDING_APPLIES);
	assert_int_equal(check(g, "api.github.test", "HEAD", "/"), EGRESS_BINDING_APPLIES);
	assert_int_equal(check(g, "api.github.test", "POST", "/"), EGRESS_BINDING_METHOD);
	/* Methods are case-sensitive. */
	assert_int_equal(check(g, "api.github.test", "get", "/"), EGRESS_BINDING_METHOD);
	assert_string_equal(egress_binding_verdict_reason(EGRESS_BINDING_HOST), "host not bound");
	assert_string_equal(egress_binding_verdict_reason(EGRESS_BINDING_PATH), "path");
	assert_string_equal(egress_binding_verdict_reason(EGRESS_BINDING_METHOD), "method");
	assert_null(egress_binding_verdict_reason(EGRESS_BINDING_APPLIES));

	/* Empty and null sets. */
	struct egress_bindings *empty = NULL;
	struct al_error err = {0};
	assert_int_equal(egress_bindings_parse(NULL, &empty, &err), 0);
	assert_int_equal(egress_bindings_count(empty), 0);
	egress_bindings_unref(empty);
	egress_bindings_unref(bs);
}

struct refusal {
	const char *json;
	const char *part;
};

#define B(extra)                                                                                                       \
	"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"" VALUE "\",\"hosts\":[\"a.test\"]" extra "}]"

static const struct refusal refusals[] = {
    {"{}", "\"bindings\" must be an array"},
    {"[1]", "bindings[0]: must be an object"},
    {B(",\"extra\":1"), "bindings[0]: unknown key \"extra\""},
    {"[{\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"a.test\"]}]", "\"secret\" must be"},
    {"[{\"secret\":\"s 1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"a.test\"]}]", "\"secret\""},
    {"[{\"secret\":\"s1\",\"placeholder\":\"airlock-ph-12\",\"value\":\"v\",\"hosts\":[\"a.test\"]}]",
     "\"placeholder\""},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"line\\r\\nX-Evil: 1\",\"hosts\":[\"a.test\"]}]",
     "\"value\" must be"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"\",\"hosts\":[\"a.test\"]}]", "\"value\""},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"x" PH_B "\",\"hosts\":[\"a.test\"]}]",
     "must not contain"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[]}]", "\"hosts\" must be"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\"}]", "\"hosts\" must be"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"10.0.0.0/8\"]}]",
     "hosts[0] \"10.0.0.0/8\": a host name"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"203.0.113.7\"]}]", "hosts[0]"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"*.com\"]}]", "hosts[0]"},
    {B(",\"paths\":[\"v1/\"]"), "paths[0]"},
    {B(",\"paths\":[\"/a b\"]"), "paths[0]"},
    {B(",\"paths\":\"/v1/\""), "\"paths\" must be"},
    {B(",\"methods\":[\"G ET\"]"), "methods[0]"},
    {B(",\"header\":\"Host\""), "\"header\" Host frames or routes"},
    {B(",\"header\":\"transfer-encoding\""), "frames or routes"},
    {B(",\"header\":\"Bad Name\""), "\"header\" must be"},
    {B(",\"header\":\"X-Key\",\"format\":\"Bearer\""), "\"format\""},
    {B(",\"header\":\"X-Key\",\"format\":\"{value}{value}\""), "\"format\""},
    {B(",\"header\":\"X-Key\",\"format\":\"a\\n{value}\""), "\"format\""},
    {B(",\"format\":\"Bearer {value}\""), "\"format\" needs a \"header\""},
    {B(",\"headers\":[]"), "\"headers\" must name at least one"},
    {B(",\"headers\":[\"Host\"]"), "headers[0] \"Host\" is not valid"},
    {B(",\"headers\":[\"Bad Name\"]"), "headers[0]"},
    {B(",\"headers\":\"Authorization\""), "\"headers\" must be"},
    {B(",\"headers\":[\"A\",\"B\",\"C\",\"D\",\"E\",\"F\",\"G\",\"H\",\"I\"]"), "\"headers\" must be"},
    {B(",\"header\":\"X-Key\",\"headers\":[\"X-Key\"]"), "\"headers\" only without"},
    {"[{\"secret\":\"s1\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"a.test\"]},"
     "{\"secret\":\"s2\",\"placeholder\":\"" PH_A "\",\"value\":\"w\",\"hosts\":[\"b.test\"]}]",
     "same placeholder"},
};

static void test_bindings_refusals(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(refusals); i++) {
		json_error_t jerr;
		cleanup_json json_t *j = json_loads(refusals[i].json, JSON_DECODE_ANY, &jerr);
		if (!j) {
			print_error("bad test JSON %s: %s\n", refusals[i].json, jerr.text);
			fail();
		}
		struct egress_bindings *b = (struct egress_bindings *)0x1;
		struct al_error err = {0};
		assert_int_equal(egress_bindings_parse(j, &b, &err), -EINVAL);
		assert_ptr_equal(b, (struct egress_bindings *)0x1);
		if (!strstr(err.message, refusals[i].part)) {
			print_error("%s: \"%s\" lacks \"%s\"\n", refusals[i].json, err.message, refusals[i].part);
			fail();
		}
		/* SECURITY: never a value in a message. */
		assert_null(strstr(err.message, VALUE));
		assert_null(strstr(err.message, "X-Evil"));
	}
}

static void test_bindings_limits(void **state)
{
	(void)state;
	cleanup_json json_t *arr = json_array();
	for (int i = 0; i <= EGRESS_BINDINGS_MAX; i++) {
		char ph[POLICY_PLACEHOLDER_LEN + 1];
		snprintf(ph, sizeof(ph), "airlock-ph-%064x", i);
		json_array_append_new(
		    arr, json_pack("{sssssss[s]}", "secret", "s", "placeholder", ph, "value", "v", "hosts", "a.test"));
	}
	struct egress_bindings *b = NULL;
	struct al_error err = {0};
	assert_int_equal(egress_bindings_parse(arr, &b, &err), -EINVAL);
	assert_non_null(strstr(err.message, "at most 256"));
	json_array_remove(arr, 0);
	assert_int_equal(egress_bindings_parse(arr, &b, &err), 0);
	assert_int_equal(egress_bindings_count(b), EGRESS_BINDINGS_MAX);
	egress_bindings_unref(b);
}

static void test_path_safe(void **state)
{
	(void)state;
	static const char *const safe[] = {"/",      "/v1/models", "/v1/a.b/c", "/v1/...", "/v1/..x",
	                                   "/a%20b", "/%41",       "/v1//x",    "*",       "/x;y"};
	static const char *const unsafe[] = {
	    "/v1/..",      "/v1/../admin", "/..",     "..",  "/v1/..;/admin", "/v1/%2e%2e", "/v1/.%2E/", "/v1%2fadmin",
	    "/v1%2Fadmin", "/v1%5cadmin",  "/v1\\..", "/a%", "/a%2",          "/a%zz",      "/a%00b"};
	for (size_t i = 0; i < ARRAY_SIZE(safe); i++)
		if (egress_path_safe(safe[i], strlen(safe[i])) != 0) {
			print_error("%s: refused\n", safe[i]);
			fail();
		}
	for (size_t i = 0; i < ARRAY_SIZE(unsafe); i++)
		if (egress_path_safe(unsafe[i], strlen(unsafe[i])) != -EINVAL) {
			print_error("%s: accepted\n", unsafe[i]);
			fail();
		}
	assert_int_equal(egress_path_safe("/a\0b", 4), -EINVAL);
}

static void test_bindings_slot(void **state)
{
	(void)state;
	struct egress_bindings_slot slot;
	egress_bindings_slot_init(&slot);
	assert_null(egress_bindings_slot_get(&slot));
	struct egress_bindings *one = bindings_from(good_bindings);
	egress_bindings_slot_set(&slot, one);
	struct egress_bindings *held = egress_bindings_slot_get(&slot);
	assert_ptr_equal(held, one);
	/* Replaced: the holder finishes with the old set, intact. */
	egress_bindings_slot_set(&slot, bindings_from("[]"));
	assert_string_equal(egress_bindings_get(held, 0)->value, VALUE);
	egress_bindings_unref(held);
	struct egress_bindings *now = egress_bindings_slot_get(&slot);
	assert_int_equal(egress_bindings_count(now), 0);
	egress_bindings_unref(now);
	egress_bindings_slot_release(&slot);
}

/* ------------------------------------------------------------ the policy */

static struct egress_policy *policy_from(const char *text, struct al_error *err)
{
	json_error_t jerr;
	cleanup_json json_t *j = json_loads(text, 0, &jerr);
	assert_non_null(j);
	struct egress_policy *p = NULL;
	if (egress_policy_parse(j, &p, err) < 0)
		return NULL;
	return p;
}

static void test_policy_tls_and_pinned(void **state)
{
	(void)state;
	struct al_error err = {0};
	struct egress_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}", &err);
	assert_non_null(p);
	/* Issue 17: no "tls" is the default (inspect when there is a CA). */
	assert_int_equal(egress_policy_tls_mode(p), EGRESS_TLS_DEFAULT);
	egress_policy_unref(p);
	assert_int_equal(egress_policy_tls_mode(NULL), EGRESS_TLS_DEFAULT);

	p = policy_from("{\"allow\":[\"*.example.com\"],\"tls\":\"inspect\",\"pinned\":[\"bank.example.com\","
	                "\"*.pinned.test\",\"port.test:443\",\"other.test:8443\"]}",
	                &err);
	assert_non_null(p);
	assert_int_equal(egress_policy_tls_mode(p), EGRESS_TLS_INSPECT);
	assert_int_equal(egress_policy_pinned_count(p), 4);
	const char *pattern = NULL;
	struct policy_host h = host_of("bank.example.com");
	assert_true(egress_policy_pinned(p, &h, &pattern));
	assert_string_equal(pattern, "bank.example.com");
	h = host_of("a.b.pinned.test");
	assert_true(egress_policy_pinned(p, &h, &pattern));
	assert_string_equal(pattern, "*.pinned.test");
	h = host_of("port.test");
	assert_true(egress_policy_pinned(p, &h, NULL));
	h = host_of("other.test");
	assert_false(egress_policy_pinned(p, &h, &pattern));
	assert_null(pattern);
	h = host_of("pinned.test");
	assert_false(egress_policy_pinned(p, &h, NULL));
	/* Pinning decides nothing about allowing. */
	h = host_of("bank.example.com");
	assert_true(egress_policy_decide_host(p, &h, 443, NULL));
	egress_policy_unref(p);

	p = policy_from("{\"tls\":\"passthrough\",\"pinned\":[]}", &err);
	assert_non_null(p);
	assert_int_equal(egress_policy_tls_mode(p), EGRESS_TLS_PASSTHROUGH);
	egress_policy_unref(p);
	p = policy_from("{\"tls\":null}", &err);
	assert_non_null(p);
	assert_int_equal(egress_policy_tls_mode(p), EGRESS_TLS_DEFAULT);
	egress_policy_unref(p);

	static const struct refusal bad[] = {
	    {"{\"tls\":\"mitm\"}", "\"tls\" must be \"passthrough\" or \"inspect\""},
	    {"{\"tls\":\"Inspect\"}", "\"tls\" must be"},
	    {"{\"tls\":true}", "\"tls\" must be"},
	    {"{\"pinned\":\"a.test\"}", "\"pinned\" must be an array of host patterns"},
	    {"{\"pinned\":[\"*bad.test\"]}", "pinned[0] \"*bad.test\""},
	    {"{\"pinned\":[\"ok.test\",\"10.0.0.0/8\"]}", "pinned[1] \"10.0.0.0/8\": a host name"},
	    {"{\"pinned\":[\"[2001:db8::1]\"]}", "pinned[0]"},
	    {"{\"pinned\":[1]}", "pinned[0] is not a string"},
	    {"{\"allow\":[],\"inspect\":true}", "unknown key \"inspect\""},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct al_error e = {0};
		assert_null(policy_from(bad[i].json, &e));
		if (!strstr(e.message, bad[i].part)) {
			print_error("%s: \"%s\" lacks \"%s\"\n", bad[i].json, e.message, bad[i].part);
			fail();
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ca_refusals),
	    cmocka_unit_test(test_leaf_issue),
	    cmocka_unit_test(test_leaf_cache),
	    cmocka_unit_test(test_ca_describe),
	    cmocka_unit_test(test_bindings_parse_and_match),
	    cmocka_unit_test(test_bindings_refusals),
	    cmocka_unit_test(test_bindings_limits),
	    cmocka_unit_test(test_path_safe),
	    cmocka_unit_test(test_bindings_slot),
	    cmocka_unit_test(test_policy_tls_and_pinned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
