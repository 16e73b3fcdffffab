/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's secret bindings inside airlock-egress (issue 6, DESIGN.md
 * "Credentials stay outside"; docs/egress.md "TLS interception"): which
 * secret may be sent to which hosts, paths and methods, and how (a header
 * set to a format, or the sandbox's placeholder replaced in the values of
 * the header fields the binding names, Authorization by default).
 *
 * A set of bindings is parsed once from airlockd's "bindings" array into an
 * immutable, reference-counted object; a sandbox holds its current set in a
 * slot and every intercepted connection takes one reference, so a "secrets"
 * message (rotation, deletion) is atomic: a request sees the old set or the
 * new one, never a mix.
 *
 * SECURITY: the values are the only copies of real credentials in this
 * process. They are never logged, never put in an event or an error
 * message (errors name the binding by index and secret name only), and are
 * wiped (OPENSSL_cleanse) when the set is freed. Everything else in a
 * binding is checked as strictly as policy rules: a value or format that
 * could break a header line (CR, LF, NUL, other controls), a header that
 * frames the message (Host, Content-Length, Transfer-Encoding, ...), an
 * unknown key: the whole set is refused and the previous one stays.
 */
#ifndef AIRLOCK_EGRESS_BINDINGS_H
#define AIRLOCK_EGRESS_BINDINGS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "policy-rule.h"

#define EGRESS_BINDINGS_MAX 256        /* bindings of one sandbox */
#define EGRESS_BINDING_HOSTS_MAX 64    /* host patterns of one binding */
#define EGRESS_BINDING_PATHS_MAX 64    /* path prefixes of one binding */
#define EGRESS_BINDING_METHODS_MAX 16  /* methods of one binding */
#define EGRESS_BINDING_SECRET_MAX 128  /* a secret's name, bytes */
#define EGRESS_BINDING_FORMAT_MAX 1024 /* the format, bytes (with "{value}") */
#define EGRESS_BINDING_HEADER_MAX 64   /* a header name, bytes (egress-http1: EGRESS_HTTP1_FIELD_NAME_MAX) */
#define EGRESS_BINDING_PATH_MAX 1024   /* one path prefix, bytes */
#define EGRESS_BINDING_METHOD_MAX 32   /* one method, bytes */
#define EGRESS_BINDING_HEADERS_MAX 8   /* placeholder mode: fields (egress-http1: EGRESS_HTTP1_SUBST_FIELDS_MAX) */
#define EGRESS_BINDING_HEADERS_DEFAULT "Authorization"
/* A placeholder: POLICY_PLACEHOLDER_PREFIX + 64 lower-case hex digits (policy-limits.h). */

struct egress_binding {
	char *secret;      /* its name (printable ASCII), for events */
	char *placeholder; /* "airlock-ph-<64 hex>" */
	char *value;       /* SECURITY: the credential; wiped when freed */
	size_t value_len;
	struct policy_rule *hosts; /* policy_host_pattern_parse */
	char **host_texts;
	size_t n_hosts;
	char **paths; /* prefixes, each "/..."; none: any path */
	size_t n_paths;
	char **methods; /* none: any method */
	size_t n_methods;
	char *header; /* NULL: placeholder mode */
	/* Placeholder mode (issue 17): the fields the placeholder is replaced
	 * in, and nowhere else; "headers" absent or null: Authorization. */
	char **headers;
	size_t n_headers;
	char *format; /* header mode: contains "{value}" exactly once */
};

struct egress_bindings;

/*
 * Parses a "bindings" array (NULL or JSON null: an empty set). Any invalid
 * binding refuses the whole set; the message names "bindings[i]" and, when
 * readable, its secret name, never a value. Returns 0 or -EINVAL.
 */
int egress_bindings_parse(const json_t *in, struct egress_bindings **ret, struct al_error *err);

struct egress_bindings *egress_bindings_ref(struct egress_bindings *b);
/* The last reference wipes every value. Accepts NULL. */
void egress_bindings_unref(struct egress_bindings *b);
static inline void egress_bindings_unrefp(struct egress_bindings **b)
{
	egress_bindings_unref(*b);
}
#define cleanup_egress_bindings __attribute__((cleanup(egress_bindings_unrefp)))

size_t egress_bindings_count(const struct egress_bindings *b);
const struct egress_binding *egress_bindings_get(const struct egress_bindings *b, size_t i);

/* Does the binding's host list match this canonical host? */
bool egress_binding_names_host(const struct egress_binding *b, const struct policy_host *host);
/* Does any binding of the set name the host (interception is needed)?
 * *ret_secret (may be NULL): the first such secret's name. */
bool egress_bindings_name_host(const struct egress_bindings *b, const struct policy_host *host,
                               const char **ret_secret);

/* Why a binding does not apply to a request (egress_binding_check). */
enum egress_binding_verdict {
	EGRESS_BINDING_APPLIES = 0,
	EGRESS_BINDING_HOST, /* the host is not one of its hosts */
	EGRESS_BINDING_PATH, /* the path is under none of its prefixes */
	EGRESS_BINDING_METHOD,
};

/*
 * Does the binding apply to a request for this host, method and path (the
 * request target up to '?', already checked by egress_path_safe())? Paths are literal prefixes ("/v1/" covers
 * "/v1/models", not "/v1"); methods are compared exactly (they are
 * case-sensitive).
 */
enum egress_binding_verdict egress_binding_check(const struct egress_binding *b, const struct policy_host *host,
                                                 const char *method, size_t method_len, const char *path,
                                                 size_t path_len);

/* "host not bound", "path", "method" (for events), or NULL for APPLIES. */
const char *egress_binding_verdict_reason(enum egress_binding_verdict v);

/*
 * May path prefixes be matched against this request path (the target up to
 * '?')? SECURITY: what a server could decode or normalise into another path
 * than the one matched is refused, so that a prefix "/v1/" never lets
 * "/v1/../admin" or "/v1%2f..%2fadmin" through: a ".." segment (also
 * "..;params"), a percent-encoded '.', '/', '\' or NUL, a '%' without two
 * hex digits, a backslash, a NUL. Returns 0 or -EINVAL.
 */
int egress_path_safe(const char *path, size_t len);

/* ------------------------------------------------------------ the slot */

struct egress_bindings_slot {
	pthread_mutex_t lock;
	struct egress_bindings *bindings;
};

void egress_bindings_slot_init(struct egress_bindings_slot *slot);
/* A new reference to the current set (NULL if there is none). */
struct egress_bindings *egress_bindings_slot_get(struct egress_bindings_slot *slot);
/* Replaces the set; b is a reference, taken over (NULL: none). */
void egress_bindings_slot_set(struct egress_bindings_slot *slot, struct egress_bindings *b);
void egress_bindings_slot_release(struct egress_bindings_slot *slot);

#endif
