/* SPDX-License-Identifier: Apache-2.0 */
/* Warm pools (docs/api.md, "Warm pools"): GET /v1/pools lists them with
 * their memory, PUT /v1/pools sets one's size; /metrics gets their series
 * from pools_metrics_text. */
#include <inttypes.h>

#include "api-handlers.h"
#include "api-request.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

/* SECURITY: a tenant sees of a shared pool only its shape, size and ready
 * count: its counts, memory and errors tell of other tenants' creates and
 * of the host (the operator's, like /metrics). */
static json_t *pool_to_json(const struct pool_status *p, bool full)
{
	json_t *o = json_pack("{s:s?, s:s, s:I, s:I, s:I, s:I, s:b}", "tenant",
	                      p->spec.tenant[0] ? p->spec.tenant : NULL, "template", p->spec.template_name, "vcpus",
	                      (json_int_t)p->spec.vcpus, "memory_mib", (json_int_t)p->spec.memory_mib, "size",
	                      (json_int_t)p->spec.size, "ready", (json_int_t)p->ready, "filling", p->filling);
	if (!o)
		abort();
	if (!full)
		return o;
	json_object_set_new(o, "pss_bytes", json_integer((json_int_t)p->pss_bytes));
	json_object_set_new(o, "pss_per_vm_bytes", json_integer((json_int_t)(p->ready ? p->pss_bytes / p->ready : 0)));
	json_object_set_new(o, "counts",
	                    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)p->hits, "misses",
	                              (json_int_t)p->misses, "fills", (json_int_t)p->fills, "failures",
	                              (json_int_t)p->failures, "shed", (json_int_t)p->shed, "lost",
	                              (json_int_t)p->lost));
	if (p->error[0])
		json_object_set_new(o, "error", json_string(p->error));
	return o;
}

static void answer_pools(const char *tenant, struct api_response *resp)
{
	struct pool_status *v = NULL;
	size_t n = 0;
	sandbox_pools_list(tenant, &v, &n);
	json_t *arr = json_array();
	uint64_t pss = 0;
	unsigned ready = 0;
	for (size_t i = 0; i < n; i++) {
		bool full = !tenant || v[i].spec.tenant[0];
		json_array_append_new(arr, pool_to_json(&v[i], full));
		pss += full ? v[i].pss_bytes : 0;
		ready += v[i].ready;
	}
	free(v);
	resp->body =
	    json_pack("{s:o, s:I, s:I}", "pools", arr, "ready", (json_int_t)ready, "pss_bytes", (json_int_t)pss);
	if (!resp->body)
		abort();
	if (tenant)
		return;
	struct pool_memory m;
	sandbox_pools_memory(&m);
	json_object_set_new(resp->body, "host_memory",
	                    json_pack("{s:I, s:I, s:I, s:b}", "total_bytes", (json_int_t)m.host_total_bytes,
	                              "available_bytes", (json_int_t)m.host_available_bytes, "high_pct",
	                              (json_int_t)m.high_pct, "shedding", m.shedding));
}

API_HANDLER(api_pool_list)
{
	answer_pools(req->tenant, resp);
}

API_HANDLER(api_pool_put)
{
	struct al_error err = {0};
	struct pool_spec spec;
	if (pool_request_parse(req->body, req->body_len, api_config()->host_memory_mib, &spec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	/* SECURITY: a tenant sets only its own pool (named or not), within its
	 * quotas; the shared pools (no tenant) are the operator's. */
	if (req->tenant) {
		if (spec.tenant[0] && strcmp(spec.tenant, req->tenant)) {
			api_response_errorf(
			    resp, AL_ERR_FORBIDDEN,
			    "tenant: your token belongs to tenant \"%s\"; it cannot set a pool of \"%s\"", req->tenant,
			    spec.tenant);
			return;
		}
		strlcpy_al(spec.tenant, req->tenant, sizeof(spec.tenant));
	}
	struct tenant_quota quota = {0};
	if ((spec.tenant[0] && auth_quota_get(spec.tenant, &quota, &err) < 0) ||
	    sandbox_pool_set(&spec, spec.tenant[0] ? &quota : NULL, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	answer_pools(req->tenant, resp);
}

/* The pools' series for /metrics (docs/api.md, "Prometheus metrics"). */
static void pool_labels(const struct pool_spec *s, char *out, size_t size)
{
	/* Names are [a-z0-9_-]: nothing to escape in a label value. */
	snprintf(out, size, "template=\"%s\",vcpus=\"%u\",memory_mib=\"%u\",tenant=\"%s\"", s->template_name, s->vcpus,
	         s->memory_mib, s->tenant);
}

char *pools_metrics_text(void)
{
	struct pool_status *v = NULL;
	size_t n = 0;
	sandbox_pools_list(NULL, &v, &n);
	struct pool_memory m;
	sandbox_pools_memory(&m);
	struct {
		const char *name, *type, *help;
	} series[] = {
	    {"airlock_pool_size", "gauge", "VMs a warm pool is to hold"},
	    {"airlock_pool_ready", "gauge", "VMs of a warm pool restored, paused and ready"},
	    {"airlock_pool_pss_bytes", "gauge", "proportional set size of a warm pool's ready VMs (VMM and jailer)"},
	    {"airlock_pool_vm_pss_bytes", "gauge",
	     "proportional set size of one of a warm pool's ready VMs, on average"},
	    {"airlock_pool_hits_total", "counter", "creates that took a VM of the pool"},
	    {"airlock_pool_misses_total", "counter", "creates of the pool's shape that found it empty"},
	    {"airlock_pool_shed_total", "counter", "pooled VMs stopped because host memory was above the mark"},
	};
	size_t cap = 4096 + n * 1024, off = 0;
	char *out = xmalloc(cap);
	out[0] = '\0';
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		off += (size_t)snprintf(out + off, cap - off, "# HELP %s %s\n# TYPE %s %s\n", series[k].name,
		                        series[k].help, series[k].name, series[k].type);
		for (size_t i = 0; i < n; i++) {
			char labels[256];
			pool_labels(&v[i].spec, labels, sizeof(labels));
			uint64_t per_vm = v[i].ready ? v[i].pss_bytes / v[i].ready : 0;
			uint64_t vals[] = {v[i].spec.size, v[i].ready,  v[i].pss_bytes, per_vm,
			                   v[i].hits,      v[i].misses, v[i].shed};
			uint64_t val = vals[k];
			off +=
			    (size_t)snprintf(out + off, cap - off, "%s{%s} %" PRIu64 "\n", series[k].name, labels, val);
		}
	}
	uint64_t pss = 0;
	for (size_t i = 0; i < n; i++)
		pss += v[i].pss_bytes;
	snprintf(out + off, cap - off,
	         "# HELP airlock_pools_pss_bytes proportional set size of every warm pool's ready VMs\n"
	         "# TYPE airlock_pools_pss_bytes gauge\nairlock_pools_pss_bytes %" PRIu64 "\n"
	         "# HELP airlock_pools_shedding 1 while host memory is above --pool-memory-high-pct\n"
	         "# TYPE airlock_pools_shedding gauge\nairlock_pools_shedding %d\n",
	         pss, m.shedding ? 1 : 0);
	free(v);
	return out;
}
