/* SPDX-License-Identifier: Apache-2.0 */
/* pool and info: warm pools (docs/api.md, "Warm pools") and what the daemon
 * is (GET /healthz) with its pools' memory. */
#include "cli.h"

#define MIB (1024 * 1024)

static long long num(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/* ------------------------------------------------------------ pool ls */

static void print_pool_row(json_t *p)
{
	json_t *tenant = json_object_get(p, "tenant"), *counts = json_object_get(p, "counts");
	/* A tenant sees no counts or memory of a shared pool. */
	char hits[48] = "-", pss[32] = "-", per_vm[32] = "-";
	if (counts)
		snprintf(hits, sizeof(hits), "%lld/%lld", num(counts, "hits"), num(counts, "misses"));
	if (json_object_get(p, "pss_bytes"))
		snprintf(pss, sizeof(pss), "%lld", num(p, "pss_bytes") / MIB);
	if (json_object_get(p, "pss_per_vm_bytes"))
		snprintf(per_vm, sizeof(per_vm), "%lld", num(p, "pss_per_vm_bytes") / MIB);
	/* SECURITY: names are the daemon's checked [a-z0-9_-], escaped all the same. */
	printf("%-20s %5lld %6lld %-16s %4lld %5lld%s %8s %10s  %s\n", cli_esc_json(p, "template"), num(p, "vcpus"),
	       num(p, "memory_mib"), json_is_string(tenant) ? cli_esc(json_string_value(tenant)) : "shared",
	       num(p, "size"), num(p, "ready"), json_is_true(json_object_get(p, "filling")) ? "+" : " ", pss, per_vm,
	       hits);
	const char *error = json_string_value(json_object_get(p, "error"));
	if (error)
		printf("  last fill failed: %s\n", cli_esc(error));
}

/* The answer of GET or PUT /v1/pools: all of it with --json, else a table. */
static void print_pools(json_t *answer)
{
	if (cli_opt_json) {
		cli_print_json(answer, true);
		return;
	}
	printf("%-20s %5s %6s %-16s %4s %6s %8s %10s  %s\n", "TEMPLATE", "VCPUS", "MIB", "TENANT", "SIZE", "READY",
	       "PSS_MIB", "PER_VM_MIB", "HITS/MISSES");
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(answer, "pools"), i, p)
		print_pool_row(p);
}

/* ------------------------------------------------------------ pool set */

/* TEMPLATE or TEMPLATE:VCPUS:MiB into body's template, vcpus, memory_mib. The
 * daemon checks the name and the ranges; here only the form. */
static int pool_shape_parse(const char *arg, json_t *body)
{
	static const char form[] = "pool set: the pool must be TEMPLATE or TEMPLATE:VCPUS:MiB (e.g. minimal or "
	                           "minimal:1:256), got \"%s\"";
	const char *c1 = strchr(arg, ':');
	if (c1 == arg || !*arg)
		return cli_usage_error(form, arg);
	if (!c1) {
		json_object_set_new(body, "template", json_string(arg));
		return 0;
	}
	const char *c2 = strchr(c1 + 1, ':');
	if (!c2)
		return cli_usage_error(form, arg);
	cleanup_free char *vcpus = xstrndup(c1 + 1, (size_t)(c2 - c1 - 1));
	long v, m;
	if (parse_int_range(vcpus, 1, 1024, &v) < 0 || parse_int_range(c2 + 1, 1, 1L << 24, &m) < 0)
		return cli_usage_error("pool set: VCPUS and MiB must be whole numbers (e.g. minimal:1:256), got \"%s\"",
		                       arg);
	json_object_set_new(body, "template", json_stringn(arg, (size_t)(c1 - arg)));
	json_object_set_new(body, "vcpus", json_integer(v));
	json_object_set_new(body, "memory_mib", json_integer(m));
	return 0;
}

static int pool_set_opt(int c, void *ud)
{
	if (c == 't')
		*(const char **)ud = optarg;
	return 0;
}

static int pool_set(int argc, char **argv)
{
	static const struct option longs[] = {{"tenant", required_argument, NULL, 't'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	static const char operands[] = "pool set takes TEMPLATE[:VCPUS:MiB] N [--tenant T] (N from 0, which removes "
	                               "the pool)";
	/* getopt would take a negative size for an option: name it first. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9')
			return cli_usage_error(
			    "pool set: N must be a whole number from 0 (0 removes the pool), got \"%s\"", argv[i]);
	const char *tenant = NULL;
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, pool_set_opt, &tenant);
	if (r)
		return r;
	if (argc - first != 2)
		return cli_usage_error("%s", operands);
	cleanup_json json_t *body = json_object();
	long size;
	if ((r = pool_shape_parse(argv[first], body)))
		return r;
	if (parse_int_range(argv[first + 1], 0, 1L << 20, &size) < 0)
		return cli_usage_error("pool set: N must be a whole number from 0 (0 removes the pool), got \"%s\"",
		                       argv[first + 1]);
	json_object_set_new(body, "size", json_integer(size));
	if (tenant)
		json_object_set_new(body, "tenant", json_string(tenant));
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("PUT", "/v1/pools", body, 200, &resp)))
		return r;
	print_pools(resp);
	return 0;
}

int cli_cmd_pool(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error("pool takes ls or set");
	const char *sub = argv[1];
	if (!strcmp(sub, "set"))
		return pool_set(argc - 1, argv + 1);
	if (strcmp(sub, "ls"))
		return cli_usage_error("pool: unknown subcommand \"%s\" (ls, set)", sub);
	int first = 0, r = cli_small_opts(argc - 1, argv + 1, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first != argc - 1)
		return cli_usage_error("pool ls takes no operands");
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("GET", "/v1/pools", NULL, 200, &resp)))
		return r;
	print_pools(resp);
	return 0;
}

/* ------------------------------------------------------------ info */

static void print_info(json_t *health, json_t *pools)
{
	printf("version       %s\n", cli_esc_json(health, "version"));
	printf("backend       %s\n", cli_esc_json(health, "backend"));
	const char *cpu = json_string_value(json_object_get(health, "cpu"));
	printf("accel         %s (%s)\n", cli_esc_json(health, "accel"), cli_esc_json(health, "accel_reason"));
	if (cpu)
		printf("cpu           %s\n", cli_esc(cpu));
	printf("warm pools    %zu, %lld VMs ready, PSS %lld MiB\n", json_array_size(json_object_get(pools, "pools")),
	       num(pools, "ready"), num(pools, "pss_bytes") / MIB);
	json_t *m = json_object_get(pools, "host_memory");
	if (!m) /* the operator's: not shown to a tenant */
		return;
	char mark[48];
	if (num(m, "high_pct") > 0)
		snprintf(mark, sizeof(mark), "high-water mark %lld%%", num(m, "high_pct"));
	else
		snprintf(mark, sizeof(mark), "no high-water mark");
	printf("host memory   %lld MiB total, %lld MiB available, %s, %s\n", num(m, "total_bytes") / MIB,
	       num(m, "available_bytes") / MIB, mark,
	       json_is_true(json_object_get(m, "shedding")) ? "shedding pooled VMs" : "not shedding");
}

int cli_cmd_info(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first != argc)
		return cli_usage_error("info takes no operands");
	cleanup_json json_t *health = NULL, *pools = NULL;
	if ((r = cli_call("GET", "/healthz", NULL, 200, &health)) ||
	    (r = cli_call("GET", "/v1/pools", NULL, 200, &pools)))
		return r;
	if (cli_opt_json) {
		cleanup_json json_t *both = json_pack("{s:O, s:O}", "healthz", health, "pools", pools);
		cli_print_json(both, true);
		return 0;
	}
	print_info(health, pools);
	return 0;
}
