/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the Airlock CA (src/daemon/store/ca.c): what it makes, that it is
 * kept across starts, and the refusals of files others could read. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "ca.h"
#include "util.h"

static char dir[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-ca-XXXXXX", base ? base : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	ca_shutdown();
	return rm_rf(dir);
}

static char *path_of(const char *name)
{
	return xasprintf("%s/%s%s%s", dir, CA_DIR, name[0] ? "/" : "", name);
}

static int init(bool *created, struct al_error *err)
{
	*err = (struct al_error){0};
	return ca_init(dir, created, err);
}

static X509 *parse_cert(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	assert_non_null(x);
	return x;
}

static void test_made_at_first_start(void **state)
{
	(void)state;
	bool created = false;
	struct al_error err;
	assert_null(ca_cert_pem());
	assert_int_equal(init(&created, &err), 0);
	assert_true(created);

	struct stat st;
	cleanup_free char *d = path_of(""), *k = path_of(CA_KEY_FILE), *c = path_of(CA_CERT_FILE);
	assert_int_equal(stat(d, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(stat(k, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(stat(c, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);

	const char *pem = ca_cert_pem();
	assert_non_null(pem);
	assert_non_null(strstr(pem, "-----BEGIN CERTIFICATE-----"));
	assert_null(strstr(pem, "PRIVATE KEY"));
	X509 *x = parse_cert(pem);
	/* CA:TRUE, keyCertSign, self-signed, EC P-256, named, ~10 years. */
	assert_int_equal(X509_check_ca(x), 1);
	assert_true(X509_get_extension_flags(x) & EXFLAG_CA);
	assert_true(X509_get_key_usage(x) & KU_KEY_CERT_SIGN);
	assert_int_equal(X509_check_issued(x, x), X509_V_OK);
	EVP_PKEY *pub = X509_get0_pubkey(x);
	assert_int_equal(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
	char group[64] = "";
	size_t glen = 0;
	assert_int_equal(EVP_PKEY_get_group_name(pub, group, sizeof(group), &glen), 1);
	assert_string_equal(group, "prime256v1");
	assert_int_equal(X509_verify(x, pub), 1);
	char cn[128] = "";
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof(cn));
	assert_int_equal(strncmp(cn, "Airlock sandbox CA ", 19), 0);
	int days = 0, secs = 0;
	assert_int_equal(ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(x)), 1);
	assert_true(days > 3640 && days <= CA_VALIDITY_DAYS);

	/* The key, read for the gateway, is the certificate's. */
	char *key = NULL;
	size_t klen = 0;
	assert_int_equal(ca_key_pem(&key, &klen, &err), 0);
	assert_int_equal(klen, strlen(key));
	assert_non_null(strstr(key, "-----BEGIN PRIVATE KEY-----"));
	BIO *b = BIO_new_mem_buf(key, (int)klen);
	EVP_PKEY *priv = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	BIO_free(b);
	assert_non_null(priv);
	assert_int_equal(X509_check_private_key(x, priv), 1);
	EVP_PKEY_free(priv);
	explicit_bzero(key, klen);
	free(key);
	X509_free(x);
}

static void test_kept_across_starts(void **state)
{
	(void)state;
	bool created = false;
	struct al_error err;
	assert_int_equal(init(&created, &err), 0);
	cleanup_free char *first = xstrdup(ca_cert_pem());
	ca_shutdown();
	assert_int_equal(init(&created, &err), 0);
	assert_false(created);
	assert_string_equal(ca_cert_pem(), first);
	/* A missing certificate: a new CA. */
	cleanup_free char *c = path_of(CA_CERT_FILE);
	assert_int_equal(unlink(c), 0);
	assert_int_equal(init(&created, &err), 0);
	assert_true(created);
	assert_string_not_equal(ca_cert_pem(), first);
}

static void test_refusals(void **state)
{
	(void)state;
	bool created = false;
	struct al_error err;
	assert_int_equal(init(&created, &err), 0);
	cleanup_free char *d = path_of(""), *k = path_of(CA_KEY_FILE), *c = path_of(CA_CERT_FILE);
	/* A key group or world could read: no start, and the message says what to do. */
	static const mode_t bad[] = {0640, 0604, 0644, 0660, 0610};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(chmod(k, bad[i]), 0);
		assert_int_equal(init(&created, &err), -EPERM);
		assert_non_null(strstr(err.message, "chmod 600"));
		char *key = NULL;
		size_t klen;
		assert_int_equal(ca_key_pem(&key, &klen, &err), -EPERM);
	}
	assert_int_equal(chmod(k, 0400), 0);
	assert_int_equal(init(&created, &err), 0);
	assert_false(created);
	assert_int_equal(chmod(k, 0600), 0);
	/* The directory too. */
	assert_int_equal(chmod(d, 0755), 0);
	assert_int_equal(init(&created, &err), -EPERM);
	assert_non_null(strstr(err.message, "chmod 700"));
	assert_int_equal(chmod(d, 0700), 0);
	/* Another owner. */
	if (geteuid() == 0) {
		assert_int_equal(chown(k, 65534, 65534), 0);
		assert_int_equal(init(&created, &err), -EPERM);
		assert_non_null(strstr(err.message, "uid 65534"));
		assert_int_equal(chown(k, 0, 0), 0);
	}
	/* A certificate that is not the key's. */
	cleanup_free char *mine = NULL;
	size_t len = 0;
	assert_int_equal(read_file_limited(c, CA_FILE_MAX, &mine, &len), 0);
	cleanup_free char *k2 = xasprintf("%s/other", dir);
	assert_int_equal(mkdir(k2, 0700), 0);
	assert_int_equal(ca_init(k2, &created, &err), 0);
	cleanup_free char *other = xasprintf("%s/%s/%s", k2, CA_DIR, CA_CERT_FILE);
	assert_int_equal(rename(other, c), 0);
	assert_int_equal(init(&created, &err), -EINVAL);
	assert_non_null(strstr(err.message, "is not the certificate of"));
	/* Garbage. */
	assert_int_equal(write_file_atomic(c, "hello", 5, 0644), 0);
	assert_int_equal(init(&created, &err), -EINVAL);
	/* A symlinked key. */
	assert_int_equal(write_file_atomic(c, mine, len, 0644), 0);
	assert_int_equal(init(&created, &err), 0);
	cleanup_free char *moved = xasprintf("%s/moved.key", dir);
	assert_int_equal(rename(k, moved), 0);
	assert_int_equal(symlink(moved, k), 0);
	assert_true(init(&created, &err) < 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_made_at_first_start),
	    T(test_kept_across_starts),
	    T(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
