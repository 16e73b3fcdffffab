/* SPDX-License-Identifier: Apache-2.0 */
#include "egress-ca.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "egress-openssl.h"
#include "util.h"

/* One cached leaf; entries form a list, most recently used first. */
struct leaf_entry {
	struct leaf_entry *prev, *next;
	char name[EGRESS_LEAF_NAME_MAX + 1];
	X509 *cert;
	EVP_PKEY *key;
	time_t not_after;
};

struct egress_ca {
	atomic_uint refs;
	X509 *cert;
	EVP_PKEY *key;
	time_t not_after; /* the CA's own end */

	pthread_mutex_t lock;   /* the cache */
	struct leaf_entry head; /* circular list head */
	size_t len, max;
};

/* ------------------------------------------------------------ loading */

/* An encrypted key must not make OpenSSL prompt on a terminal. */
static int no_password(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

static int asn1_time_to_time_t(const ASN1_TIME *t, time_t *ret)
{
	struct tm tm;
	if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
		return -EINVAL;
	*ret = timegm(&tm);
	return 0;
}

/* The first certificate / private key of PEM text, or NULL. */
static X509 *pem_cert(const char *pem, size_t len)
{
	cleanup_bio BIO *b = BIO_new_mem_buf(pem, (int)len);
	return b ? PEM_read_bio_X509(b, NULL, no_password, NULL) : NULL;
}

static EVP_PKEY *pem_key(const char *pem, size_t len)
{
	cleanup_bio BIO *b = BIO_new_mem_buf(pem, (int)len);
	return b ? PEM_read_bio_PrivateKey(b, NULL, no_password, NULL) : NULL;
}

/* May this pair sign leaves? Sets *ret_not_after, the CA's own end. */
static int ca_check(X509 *cert, EVP_PKEY *key, time_t *ret_not_after, struct al_error *err)
{
	if (!cert)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"cert_pem\": no PEM certificate");
	if (!key)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"key_pem\": no unencrypted PEM private key");
	if (X509_check_private_key(cert, key) != 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the CA key does not match the certificate");
	if (X509_check_ca(cert) != 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the certificate is not a CA (basicConstraints CA:TRUE and keyCertSign needed)");
	if (asn1_time_to_time_t(X509_get0_notAfter(cert), ret_not_after) < 0 ||
	    X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the CA certificate has expired");
	return 0;
}

int egress_ca_new(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len, size_t cache_max,
                  struct egress_ca **ret, struct al_error *err)
{
	if (cert_len == 0 || cert_len > EGRESS_CA_PEM_MAX || key_len == 0 || key_len > EGRESS_CA_PEM_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"cert_pem\" and \"key_pem\" must be PEM text of 1 to %d bytes",
		                    EGRESS_CA_PEM_MAX);
	cleanup_x509 X509 *cert = pem_cert(cert_pem, cert_len);
	cleanup_evp_pkey EVP_PKEY *key = pem_key(key_pem, key_len);
	/* SECURITY: OpenSSL's error queue may name what it could not parse;
	 * none of it goes into the message. */
	ERR_clear_error();
	time_t not_after = 0;
	int r = ca_check(cert, key, &not_after, err);
	ERR_clear_error();
	if (r < 0)
		return r;
	struct egress_ca *ca = xcalloc(1, sizeof(*ca));
	atomic_init(&ca->refs, 1);
	ca->cert = TAKE_PTR(cert);
	ca->key = TAKE_PTR(key);
	ca->not_after = not_after;
	pthread_mutex_init(&ca->lock, NULL);
	ca->head.next = ca->head.prev = &ca->head;
	ca->max = cache_max ? cache_max : 1;
	*ret = ca;
	return 0;
}

static void leaf_entry_free(struct leaf_entry *e)
{
	X509_free(e->cert);
	EVP_PKEY_free(e->key);
	free(e);
}

struct egress_ca *egress_ca_ref(struct egress_ca *ca)
{
	if (ca)
		atomic_fetch_add_explicit(&ca->refs, 1, memory_order_relaxed);
	return ca;
}

void egress_ca_unref(struct egress_ca *ca)
{
	if (!ca || atomic_fetch_sub_explicit(&ca->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (struct leaf_entry *e = ca->head.next, *next; e != &ca->head; e = next) {
		next = e->next;
		leaf_entry_free(e);
	}
	X509_free(ca->cert);
	EVP_PKEY_free(ca->key); /* OpenSSL wipes private key material when it frees it */
	pthread_mutex_destroy(&ca->lock);
	free(ca);
}

X509 *egress_ca_cert(const struct egress_ca *ca)
{
	return ca->cert;
}

void egress_ca_describe(const struct egress_ca *ca, char *buf, size_t size)
{
	char subject[256] = "?";
	X509_NAME_oneline(X509_get_subject_name(ca->cert), subject, sizeof(subject));
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char fp[3 * EVP_MAX_MD_SIZE + 1] = "";
	if (X509_digest(ca->cert, EVP_sha256(), md, &mdlen) == 1)
		for (unsigned i = 0; i < mdlen && i < 8; i++)
			snprintf(fp + 3 * i, sizeof(fp) - 3 * i, "%02X%s", md[i], i + 1 < MIN(mdlen, 8u) ? ":" : "");
	snprintf(buf, size, "%s, SHA-256 %s...", subject, fp);
}

/* ------------------------------------------------------------ issuing */

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
	if (!ext)
		return -EIO;
	int ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -EIO;
}

/* subjectAltName built as a structure, not from configuration text: the
 * name is canonical LDH, but no text syntax is trusted with it anyway. */
static int add_san(X509 *x, const char *name)
{
	GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
	GENERAL_NAME *gen = GENERAL_NAME_new();
	ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
	int r = -EIO;
	if (gens && gen && ia5 && ASN1_STRING_set(ia5, name, (int)strlen(name)) == 1) {
		GENERAL_NAME_set0_value(gen, GEN_DNS, TAKE_PTR(ia5));
		if (sk_GENERAL_NAME_push(gens, gen) > 0) {
			gen = NULL;
			if (X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) == 1)
				r = 0;
		}
	}
	ASN1_IA5STRING_free(ia5);
	GENERAL_NAME_free(gen);
	GENERAL_NAMES_free(gens);
	return r;
}

static bool leaf_name_valid(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > EGRESS_LEAF_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
			return false;
	}
	return true;
}

static int set_serial(X509 *x)
{
	/* 127 random bits: positive, at most 16 bytes (RFC 5280 allows 20). */
	BIGNUM *bn = BN_new();
	int r = -EIO;
	if (bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ODD) == 1 &&
	    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
		r = 0;
	BN_free(bn);
	return r;
}

static const EVP_MD *sign_md(EVP_PKEY *key)
{
	int id = EVP_PKEY_get_base_id(key);
	/* Ed25519 and Ed448 sign the message itself (no digest). */
	return id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? NULL : EVP_sha256();
}

/* Fills in the certificate x for key and signs it. */
static int leaf_build(const struct egress_ca *ca, X509 *x, EVP_PKEY *key, const char *name, time_t now)
{
	time_t not_after = now + EGRESS_LEAF_VALID_S;
	if (ca->not_after && not_after > ca->not_after)
		not_after = ca->not_after;
	if (X509_set_version(x, 2) != 1 || set_serial(x) < 0 ||
	    !ASN1_TIME_set(X509_getm_notBefore(x), now - EGRESS_LEAF_BACKDATE_S) ||
	    !ASN1_TIME_set(X509_getm_notAfter(x), not_after) ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) != 1 || X509_set_pubkey(x, key) != 1)
		return -EIO;
	X509_NAME *subject = X509_get_subject_name(x);
	if (X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC, (const unsigned char *)"Airlock egress", -1, -1,
	                               0) != 1)
		return -EIO;
	/* CN is at most 64 characters (RFC 5280 ub-common-name); clients
	 * read the subjectAltName anyway. */
	if (strlen(name) <= 64 &&
	    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, (const unsigned char *)name, -1, -1, 0) != 1)
		return -EIO;
	X509V3_CTX v3;
	X509V3_set_ctx(&v3, ca->cert, x, NULL, NULL, 0);
	if (add_ext(x, &v3, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    add_ext(x, &v3, NID_key_usage, "critical,digitalSignature") < 0 ||
	    add_ext(x, &v3, NID_ext_key_usage, "serverAuth") < 0 ||
	    add_ext(x, &v3, NID_subject_key_identifier, "hash") < 0 || add_san(x, name) < 0)
		return -EIO;
	/* Helps clients pick the issuer; a CA without a key identifier of its
	 * own gets leaves without one (verification does not need it). */
	if (add_ext(x, &v3, NID_authority_key_identifier, "keyid") < 0)
		ERR_clear_error();
	return X509_sign(x, ca->key, sign_md(ca->key)) > 0 ? 0 : -EIO;
}

int egress_ca_issue(const struct egress_ca *ca, const char *name, time_t now, X509 **ret_cert, EVP_PKEY **ret_key)
{
	if (!leaf_name_valid(name))
		return -EINVAL;
	cleanup_evp_pkey EVP_PKEY *key = EVP_EC_gen("P-256");
	cleanup_x509 X509 *x = X509_new();
	int r = key && x ? leaf_build(ca, x, key, name, now) : -EIO;
	ERR_clear_error();
	if (r < 0)
		return r;
	*ret_cert = TAKE_PTR(x);
	*ret_key = TAKE_PTR(key);
	return 0;
}

/* ------------------------------------------------------------ the cache */

static void list_unlink(struct leaf_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void list_push_front(struct egress_ca *ca, struct leaf_entry *e)
{
	e->next = ca->head.next;
	e->prev = &ca->head;
	ca->head.next->prev = e;
	ca->head.next = e;
}

/* Under ca->lock. A linear scan: at most EGRESS_LEAF_CACHE_MAX short
 * strings, microseconds next to a TLS handshake. */
static struct leaf_entry *cache_find(struct egress_ca *ca, const char *name)
{
	for (struct leaf_entry *e = ca->head.next; e != &ca->head; e = e->next)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

static void hand_out(const struct leaf_entry *e, X509 **ret_cert, EVP_PKEY **ret_key)
{
	X509_up_ref(e->cert);
	EVP_PKEY_up_ref(e->key);
	*ret_cert = e->cert;
	*ret_key = e->key;
}

int egress_ca_leaf(struct egress_ca *ca, const char *name, time_t now, X509 **ret_cert, EVP_PKEY **ret_key,
                   bool *ret_cached)
{
	pthread_mutex_lock(&ca->lock);
	struct leaf_entry *e = cache_find(ca, name);
	if (e && e->not_after - now >= EGRESS_LEAF_RENEW_S) {
		list_unlink(e);
		list_push_front(ca, e);
		hand_out(e, ret_cert, ret_key);
		pthread_mutex_unlock(&ca->lock);
		if (ret_cached)
			*ret_cached = true;
		return 0;
	}
	pthread_mutex_unlock(&ca->lock);

	X509 *cert;
	EVP_PKEY *key;
	int r = egress_ca_issue(ca, name, now, &cert, &key);
	if (r < 0)
		return r;
	struct leaf_entry *n = xcalloc(1, sizeof(*n));
	n->cert = cert;
	n->key = key;
	strlcpy_al(n->name, name, sizeof(n->name));
	time_t na = now + EGRESS_LEAF_VALID_S;
	n->not_after = ca->not_after && na > ca->not_after ? ca->not_after : na;
	hand_out(n, ret_cert, ret_key);

	pthread_mutex_lock(&ca->lock);
	/* Another connection may have issued one meanwhile: the newer wins. */
	struct leaf_entry *old = cache_find(ca, name);
	if (old) {
		list_unlink(old);
		ca->len--;
	} else if (ca->len >= ca->max) {
		old = ca->head.prev; /* least recently used */
		list_unlink(old);
		ca->len--;
	}
	list_push_front(ca, n);
	ca->len++;
	pthread_mutex_unlock(&ca->lock);
	if (old)
		leaf_entry_free(old);
	if (ret_cached)
		*ret_cached = false;
	return 0;
}

size_t egress_ca_cache_len(struct egress_ca *ca)
{
	pthread_mutex_lock(&ca->lock);
	size_t n = ca->len;
	pthread_mutex_unlock(&ca->lock);
	return n;
}
