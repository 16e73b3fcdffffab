/* SPDX-License-Identifier: Apache-2.0 */
#include "cluster-auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include "util.h"

int cluster_key_load(const char *path, struct cluster_key *ret, char *err_msg, size_t err_size)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err_msg, err_size, "cannot open the cluster key %s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode) || (st.st_mode & 0007)) {
		snprintf(err_msg, err_size, "the cluster key %s must be a regular file others cannot read (chmod 600)",
		         path);
		return -EPERM;
	}
	struct cluster_key k = {0};
	ssize_t n = read_full(fd, k.bytes, sizeof(k.bytes));
	uint8_t extra;
	if (n < 0 || (n == (ssize_t)sizeof(k.bytes) && read(fd, &extra, 1) > 0) || n < CLUSTER_KEY_MIN) {
		snprintf(err_msg, err_size,
		         "the cluster key %s must hold %d to %d bytes (e.g. head -c 32 /dev/urandom)", path,
		         CLUSTER_KEY_MIN, CLUSTER_KEY_MAX);
		explicit_bzero(&k, sizeof(k));
		return -EINVAL;
	}
	k.len = (size_t)n;
	*ret = k;
	explicit_bzero(&k, sizeof(k));
	return 0;
}

/* base64url without padding (RFC 4648 section 5). */
static void base64url(const uint8_t *in, size_t n, char *out)
{
	size_t len = 0, o = 0;
	cleanup_free char *b = base64_encode(in, n, &len);
	for (size_t i = 0; i < len && b[i] != '='; i++)
		out[o++] = b[i] == '+' ? '-' : b[i] == '/' ? '_' : b[i];
	out[o] = '\0';
}

void cluster_delegation_sign(const struct cluster_key *key, const char *principal, char out[CLUSTER_TOKEN_LEN + 1])
{
	size_t lp = strlen(principal), ll = sizeof(CLUSTER_HMAC_LABEL) - 1;
	uint8_t msg[sizeof(CLUSTER_HMAC_LABEL) + CLUSTER_PRINCIPAL_MAX];
	uint8_t mac[32];
	size_t mac_len = 0;
	lp = MIN(lp, (size_t)CLUSTER_PRINCIPAL_MAX);
	memcpy(msg, CLUSTER_HMAC_LABEL, ll);
	memcpy(msg + ll, principal, lp);
	if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key->bytes, key->len, msg, ll + lp, mac, sizeof(mac),
	               &mac_len) ||
	    mac_len != sizeof(mac))
		abort(); /* no HMAC-SHA256 in libcrypto: nothing works */
	memcpy(out, CLUSTER_TOKEN_PREFIX, sizeof(CLUSTER_TOKEN_PREFIX) - 1);
	base64url(mac, sizeof(mac), out + sizeof(CLUSTER_TOKEN_PREFIX) - 1);
	explicit_bzero(mac, sizeof(mac));
}

static int exp_parse(const char *s, int64_t *ret)
{
	if (!*s || strlen(s) > 12)
		return -EINVAL;
	int64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (*s - '0');
	}
	*ret = v;
	return 0;
}

int cluster_principal_parse(const char *principal, struct cluster_principal *ret)
{
	size_t n = strnlen(principal, CLUSTER_PRINCIPAL_MAX + 1);
	if (n > CLUSTER_PRINCIPAL_MAX)
		return -EINVAL;
	const char *semi = strchr(principal, ';');
	if (!semi || strncmp(semi, ";exp=", 5))
		return -EINVAL;
	struct cluster_principal p = {0};
	if (exp_parse(semi + 5, &p.exp) < 0)
		return -EINVAL;
	size_t who = (size_t)(semi - principal);
	if (who == 8 && !strncmp(principal, "operator", 8)) {
		p.operator_ = true;
	} else if (who > 7 && who - 7 < sizeof(p.tenant) && !strncmp(principal, "tenant:", 7)) {
		memcpy(p.tenant, principal + 7, who - 7);
		if (!name_valid(p.tenant, sizeof(p.tenant) - 1))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	*ret = p;
	return 0;
}

int cluster_delegation_verify(const struct cluster_key *key, const char *principal, const char *bearer_token,
                              int64_t now_s, struct cluster_principal *ret, const char **ret_why)
{
	struct cluster_principal p;
	if (!principal || cluster_principal_parse(principal, &p) < 0) {
		*ret_why = "malformed " CLUSTER_PRINCIPAL_HEADER;
		return -EACCES;
	}
	char want[CLUSTER_TOKEN_LEN + 1];
	cluster_delegation_sign(key, principal, want);
	bool same = bearer_token && strlen(bearer_token) == CLUSTER_TOKEN_LEN &&
	            CRYPTO_memcmp(want, bearer_token, CLUSTER_TOKEN_LEN) == 0;
	explicit_bzero(want, sizeof(want));
	if (!same) {
		*ret_why = "the delegation's MAC does not match (another cluster key?)";
		return -EACCES;
	}
	if (p.exp < now_s || p.exp > now_s + CLUSTER_DELEGATION_TTL_S) {
		*ret_why = "the delegation has expired (or the clocks of front and node disagree)";
		return -EACCES;
	}
	*ret = p;
	return 0;
}
