/* SPDX-License-Identifier: Apache-2.0 */
/* The two ways a warm pool is asked for (docs/api.md, "Warm pools"):
 * airlockd's --warm-pool TEMPLATE[:VCPUS:MiB]=N and the body of PUT
 * /v1/pools. Pure functions: unit-tested and fuzzed (fuzz-pool-request). */
#include "api-request.h"

#include "auth.h"
#include "json-cleanup.h"
#include "util.h"

#define POOL_DEFAULT_VCPUS 1
#define POOL_DEFAULT_MEMORY_MIB 256

/* The shape's numbers within the host's and the model's bounds. */
static int pool_shape_check(const struct pool_spec *p, unsigned host_memory_mib, struct al_error *err)
{
	unsigned mem_max = SANDBOX_MEMORY_MIB_MAX;
	if (host_memory_mib > 0 && host_memory_mib < mem_max)
		mem_max = host_memory_mib;
	if (!template_name_valid(p->template_name) || template_name_reserved(p->template_name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "template: must be 1 to %d characters of [a-z0-9_-]", SANDBOX_TEMPLATE_NAME_MAX);
	if (p->vcpus < 1 || p->vcpus > SANDBOX_VCPUS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "vcpus: must be an integer from 1 to %d",
		                    SANDBOX_VCPUS_MAX);
	if (p->memory_mib < SANDBOX_MEMORY_MIB_MIN || p->memory_mib > mem_max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "memory_mib: must be an integer from %d to %u", SANDBOX_MEMORY_MIB_MIN, mem_max);
	if (p->size > POOL_SIZE_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "size: must be an integer from 0 to %d",
		                    POOL_SIZE_MAX);
	return 0;
}

/* A decimal number of at most 9 digits from s to end (exclusive). */
static bool pool_number(const char *s, const char *end, unsigned *ret)
{
	size_t n = (size_t)(end - s);
	if (n == 0 || n > 9)
		return false;
	unsigned v = 0;
	for (const char *c = s; c < end; c++) {
		if (*c < '0' || *c > '9')
			return false;
		v = v * 10 + (unsigned)(*c - '0');
	}
	*ret = v;
	return true;
}

int pool_flag_parse(const char *arg, unsigned host_memory_mib, struct pool_spec *ret, struct al_error *err)
{
	/* SECURITY: operator input, but checked like a client's: every part
	 * bounded before it is copied. */
	struct pool_spec p = {.vcpus = POOL_DEFAULT_VCPUS, .memory_mib = POOL_DEFAULT_MEMORY_MIB};
	const char *eq = strrchr(arg, '=');
	if (!eq || !pool_number(eq + 1, eq + 1 + strlen(eq + 1), &p.size))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--warm-pool %.80s: must be TEMPLATE[:VCPUS:MiB]=N (e.g. minimal=4 or "
		                    "minimal:1:256=4)",
		                    arg);
	const char *colon = memchr(arg, ':', (size_t)(eq - arg));
	const char *name_end = colon ? colon : eq;
	if ((size_t)(name_end - arg) > SANDBOX_TEMPLATE_NAME_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--warm-pool %.80s: the template name is too long", arg);
	memcpy(p.template_name, arg, (size_t)(name_end - arg));
	if (colon) {
		const char *colon2 = memchr(colon + 1, ':', (size_t)(eq - colon - 1));
		if (!colon2 || !pool_number(colon + 1, colon2, &p.vcpus) || !pool_number(colon2 + 1, eq, &p.memory_mib))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "--warm-pool %.80s: the shape must be TEMPLATE:VCPUS:MiB (e.g. minimal:1:256=4)", arg);
	}
	int r = pool_shape_check(&p, host_memory_mib, err);
	if (r < 0) {
		al_error_prefix(err, "--warm-pool %.80s", arg);
		return r;
	}
	*ret = p;
	return 0;
}

static int pool_get_uint(json_t *obj, const char *field, unsigned def, bool required, unsigned *ret,
                         struct al_error *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v || json_is_null(v)) {
		if (required)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: missing", field);
		*ret = def;
		return 0;
	}
	/* The ranges are checked by pool_shape_check; here only what fits. */
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be a non-negative integer", field);
	*ret = (unsigned)json_integer_value(v);
	return 0;
}

static int pool_get_name(json_t *obj, const char *field, bool required, char *out, size_t size, struct al_error *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v || json_is_null(v)) {
		out[0] = '\0';
		return required ? al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: missing", field) : 0;
	}
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be a string of 1 to %zu characters",
		                    field, size - 1);
	strlcpy_al(out, json_string_value(v), size);
	return 0;
}

int pool_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct pool_spec *ret,
                       struct al_error *err)
{
	/* SECURITY: body is client input capped by the caller. */
	static const char *const allowed[] = {"template", "vcpus", "memory_mib", "size", "tenant", NULL};
	if (len > POOL_BODY_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "request body is %zu bytes; the limit is %d", len,
		                    POOL_BODY_MAX);
	cleanup_json json_t *j = NULL;
	int r;
	if ((r = request_body_parse(body, len, &j, err)) < 0 || (r = request_fields_check(j, allowed, err)) < 0)
		return r;
	struct pool_spec p = {0};
	if ((r = pool_get_name(j, "template", true, p.template_name, sizeof(p.template_name), err)) < 0 ||
	    (r = pool_get_name(j, "tenant", false, p.tenant, sizeof(p.tenant), err)) < 0 ||
	    (r = pool_get_uint(j, "vcpus", POOL_DEFAULT_VCPUS, false, &p.vcpus, err)) < 0 ||
	    (r = pool_get_uint(j, "memory_mib", POOL_DEFAULT_MEMORY_MIB, false, &p.memory_mib, err)) < 0 ||
	    (r = pool_get_uint(j, "size", 0, true, &p.size, err)) < 0)
		return r;
	if (p.tenant[0] && !tenant_name_valid(p.tenant))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must match [a-z0-9][a-z0-9_-]{0,62}");
	if ((r = pool_shape_check(&p, host_memory_mib, err)) < 0)
		return r;
	*ret = p;
	return 0;
}
