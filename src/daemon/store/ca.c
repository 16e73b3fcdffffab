/* SPDX-License-Identifier: Apache-2.0 */
#include "ca.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <sys/stat.h>

#include "util.h"

static pthread_mutex_t ca_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cert_pem;
static char *key_path;

static void wipe_free(void *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

static void x509_freep(X509 **x)
{
	X509_free(*x);
}
static void pkey_freep(EVP_PKEY **k)
{
	EVP_PKEY_free(*k);
}
static void bio_freep(BIO **b)
{
	BIO_free(*b);
}
#define cleanup_x509 __attribute__((cleanup(x509_freep)))
#define cleanup_pkey __attribute__((cleanup(pkey_freep)))
#define cleanup_bio __attribute__((cleanup(bio_freep)))

/* ------------------------------------------------------------ files */

/* SECURITY: the CA's files must be ours alone: a key others can read lets
 * them mint certificates every sandbox trusts. */
static int check_private(const struct stat *st, const char *path, bool dir, struct al_error *err)
{
	if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "%s is not a %s", path,
		                    dir ? "directory" : "regular file");
	if (st->st_uid != geteuid())
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "%s belongs to uid %u, not to airlockd's uid %u: chown it (or remove the CA to "
		                    "have a new one made)",
		                    path, (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & 077)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "%s has mode %04o: others may read the Airlock CA's key; chmod %s it (and "
		                    "consider replacing the CA: remove %s and restart)",
		                    path, (unsigned)(st->st_mode & 07777), dir ? "700" : "600", path);
	return 0;
}

/* Reads a file of at most CA_FILE_MAX bytes into an exactly sized,
 * NUL-terminated buffer (no stray copies of a key in freed memory). With
 * private set, the file must pass check_private(). -ENOENT when missing. */
static int read_small(const char *path, bool private, char **ret, size_t *ret_len, struct al_error *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", path);
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: %m", path);
	int r = private ? check_private(&st, path, false, err) : 0;
	if (r < 0)
		return r;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > (off_t)CA_FILE_MAX)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "%s is not a PEM file of at most %u bytes", path,
		                    CA_FILE_MAX);
	size_t len = (size_t)st.st_size;
	char *buf = xmalloc(len + 1);
	ssize_t n = read_full(fd, buf, len);
	if (n != (ssize_t)len) {
		wipe_free(buf, len + 1);
		return al_error_set(err, AL_ERR_INTERNAL, n < 0 ? (int)-n : EIO, "cannot read %s", path);
	}
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

static int write_new(const char *path, const void *data, size_t len, mode_t mode, struct al_error *err)
{
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	unlink(tmp);
	cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", tmp);
	int r = fchmod(fd, mode) < 0 ? -errno : write_full(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write %s: %s", path, strerror(-r));
	}
	return 0;
}

/* ------------------------------------------------------------ making one */

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
	if (!e)
		return -EIO;
	int ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok ? 0 : -EIO;
}

static int set_serial(X509 *x)
{
	uint8_t raw[16];
	random_bytes(raw, sizeof(raw));
	raw[0] &= 0x7f; /* positive */
	raw[0] |= 0x40; /* and of full length */
	BIGNUM *bn = BN_bin2bn(raw, sizeof(raw), NULL);
	int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -EIO;
}

static X509 *make_cert(EVP_PKEY *key)
{
	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
		strlcpy_al(host, "localhost", sizeof(host));
	char cn[64]; /* ub-common-name */
	snprintf(cn, sizeof(cn), "Airlock sandbox CA %.44s", host);
	X509 *x = X509_new();
	if (!x)
		return NULL;
	X509_NAME *name = X509_get_subject_name(x);
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	bool ok = X509_set_version(x, X509_VERSION_3) && set_serial(x) == 0 &&
	          X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
	          X509_gmtime_adj(X509_getm_notAfter(x), (long)CA_VALIDITY_DAYS * 86400L) && X509_set_pubkey(x, key) &&
	          X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"Airlock", -1, -1, 0) &&
	          X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) &&
	          X509_set_issuer_name(x, name) &&
	          add_ext(x, &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") == 0 &&
	          add_ext(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign") == 0 &&
	          add_ext(x, &ctx, NID_subject_key_identifier, "hash") == 0 &&
	          add_ext(x, &ctx, NID_authority_key_identifier, "keyid:always") == 0 &&
	          X509_sign(x, key, EVP_sha256()) > 0;
	if (!ok) {
		X509_free(x);
		return NULL;
	}
	return x;
}

/* PEM of a BIO's contents into a new NUL-terminated buffer. */
static char *bio_text(BIO *b, size_t *ret_len)
{
	char *data = NULL;
	long n = BIO_get_mem_data(b, &data);
	if (n <= 0)
		return NULL;
	char *out = xmalloc((size_t)n + 1);
	memcpy(out, data, (size_t)n);
	out[n] = '\0';
	*ret_len = (size_t)n;
	return out;
}

static int ca_create(const char *key_file, const char *cert_file, struct al_error *err)
{
	cleanup_pkey EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	cleanup_x509 X509 *x = key ? make_cert(key) : NULL;
	cleanup_bio BIO *kb = BIO_new(BIO_s_secmem());
	cleanup_bio BIO *cb = BIO_new(BIO_s_mem());
	if (!x || !kb || !cb || !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL) ||
	    !PEM_write_bio_X509(cb, x))
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot make the Airlock CA (libcrypto failed)");
	size_t klen = 0, clen = 0;
	char *ktext = bio_text(kb, &klen);
	cleanup_free char *ctext = bio_text(cb, &clen);
	if (!ktext || !ctext) {
		wipe_free(ktext, klen);
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot make the Airlock CA (libcrypto failed)");
	}
	/* The key first: a certificate never exists without its key. */
	int r = write_new(key_file, ktext, klen, 0600, err);
	wipe_free(ktext, klen);
	if (r == 0)
		r = write_new(cert_file, ctext, clen, 0644, err);
	return r;
}

/* ------------------------------------------------------------ loading */

/* The certificate parsed from PEM; checks that the key is its key. */
static int ca_check(const char *cert_text, size_t cert_len, const char *key_text, size_t key_len, bool *ret_expired,
                    const char *dir, struct al_error *err)
{
	cleanup_bio BIO *cb = BIO_new_mem_buf(cert_text, (int)cert_len);
	cleanup_bio BIO *kb = BIO_new_mem_buf(key_text, (int)key_len);
	cleanup_x509 X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	cleanup_pkey EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
	if (!x || !key)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
		                    "%s/%s or %s is not valid PEM (remove both to have a new CA made)", dir,
		                    CA_CERT_FILE, CA_KEY_FILE);
	if (X509_check_private_key(x, key) != 1)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
		                    "%s/%s is not the certificate of %s (remove both to have a new CA made)", dir,
		                    CA_CERT_FILE, CA_KEY_FILE);
	if (X509_check_ca(x) != 1)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "%s/%s is not a CA certificate", dir, CA_CERT_FILE);
	*ret_expired = X509_cmp_current_time(X509_get0_notAfter(x)) <= 0;
	return 0;
}

static int ca_load(const char *dir, const char *key_file, const char *cert_file, bool *ret_expired, char **ret_cert,
                   struct al_error *err)
{
	char *key = NULL, *cert = NULL;
	size_t klen = 0, clen = 0;
	int r = read_small(key_file, true, &key, &klen, err);
	if (r == 0) {
		r = read_small(cert_file, false, &cert, &clen, err);
		if (r == 0)
			r = ca_check(cert, clen, key, klen, ret_expired, dir, err);
	}
	wipe_free(key, klen);
	if (r < 0) {
		free(cert);
		return r;
	}
	*ret_cert = cert;
	return 0;
}

int ca_init(const char *state_dir, bool *ret_created, struct al_error *err)
{
	cleanup_free char *dir = xasprintf("%s/%s", state_dir, CA_DIR);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", dir);
	struct stat st;
	if (lstat(dir, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: %m", dir);
	int r = check_private(&st, dir, true, err);
	if (r < 0)
		return r;
	cleanup_free char *kf = xasprintf("%s/%s", dir, CA_KEY_FILE);
	cleanup_free char *cf = xasprintf("%s/%s", dir, CA_CERT_FILE);
	bool expired = false, created = false;
	char *cert = NULL;
	r = ca_load(dir, kf, cf, &expired, &cert, err);
	if (r == -ENOENT || (r == 0 && expired)) {
		free(cert);
		cert = NULL;
		if ((r = ca_create(kf, cf, err)) == 0)
			r = ca_load(dir, kf, cf, &expired, &cert, err);
		if (r == -ENOENT)
			r = al_error_set(err, AL_ERR_INTERNAL, ENOENT, "%s vanished while it was made", dir);
		created = true;
	}
	if (r < 0)
		return r;
	pthread_mutex_lock(&ca_lock);
	free(cert_pem);
	free(key_path);
	cert_pem = cert;
	key_path = TAKE_PTR(kf);
	pthread_mutex_unlock(&ca_lock);
	*ret_created = created;
	return 0;
}

void ca_shutdown(void)
{
	pthread_mutex_lock(&ca_lock);
	free(cert_pem);
	free(key_path);
	cert_pem = key_path = NULL;
	pthread_mutex_unlock(&ca_lock);
}

const char *ca_cert_pem(void)
{
	/* Set once at start-up before any reader exists; replaced only by
	 * ca_init() in tests. */
	return cert_pem;
}

int ca_key_pem(char **ret_pem, size_t *ret_len, struct al_error *err)
{
	pthread_mutex_lock(&ca_lock);
	cleanup_free char *path = key_path ? xstrdup(key_path) : NULL;
	pthread_mutex_unlock(&ca_lock);
	if (!path)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT, "the Airlock CA is not loaded");
	int r = read_small(path, true, ret_pem, ret_len, err);
	if (r == -ENOENT)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT, "the Airlock CA's key %s is gone", path);
	return r;
}
