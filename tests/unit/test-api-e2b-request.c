/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for E2B's control API parsers (src/daemon/api/api-e2b-request.c):
 * the create body mapped onto Airlock's, the network mapping and its
 * refusals, the list query (the twice-encoded metadata filter, next tokens,
 * times). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "api-e2b-request.h"
#include "network-policy.h"
#include "util.h"

static int create(const char *body, struct create_request *r, struct al_error *err)
{
	memset(err, 0, sizeof(*err));
	return e2b_create_request_parse(body, strlen(body), 0, r, err);
}

static void create_refused(const char *body, const char *needle)
{
	struct create_request r;
	struct al_error err;
	assert_true(create(body, &r, &err) < 0);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (!strstr(err.message, needle))
		fail_msg("%s: \"%s\" is not in \"%s\"", body, needle, err.message);
}

static void test_create_maps(void **state)
{
	(void)state;
	struct create_request r;
	struct al_error err;
	assert_int_equal(create("{\"templateID\":\"base\",\"metadata\":{\"a\":\"b\"},\"envVars\":{\"X\":\"1\"},"
	                        "\"timeout\":60,\"autoPause\":true,\"secure\":true,\"autoPauseMemory\":false,"
	                        "\"autoResume\":{\"enabled\":false},\"mcp\":null,\"volumeMounts\":[]}",
	                        &r, &err),
	                 0);
	assert_string_equal(r.template_name, "base");
	assert_int_equal(r.vcpus, E2B_VCPUS);
	assert_int_equal(r.memory_mib, E2B_MEMORY_MIB);
	assert_int_equal(r.timeouts.timeout_s, 60);
	assert_string_equal(r.timeouts.on_timeout, "pause");
	assert_int_equal(r.env.n, 1);
	assert_string_equal(r.env.keys[0], "X");
	assert_int_equal(r.metadata.n, 1);
	assert_null(r.network_json); /* the operator's default */
	assert_false(r.timeouts.auto_resume);
	create_request_release(&r);

	assert_int_equal(
	    create("{\"templateID\":\"base\",\"autoPause\":true,\"autoResume\":{\"enabled\":true}}", &r, &err), 0);
	assert_true(r.timeouts.auto_resume);
	create_request_release(&r);

	assert_int_equal(create("{\"templateID\":\"base\"}", &r, &err), 0);
	assert_int_equal(r.timeouts.timeout_s, E2B_TIMEOUT_DEFAULT_S);
	assert_string_equal(r.timeouts.on_timeout, "kill");
	create_request_release(&r);
}

static void test_create_network(void **state)
{
	(void)state;
	struct create_request r;
	struct al_error err;
	struct policy_ceiling c;
	assert_int_equal(network_ceiling_parse(NULL, NULL, 0, &c, &err), 0); /* public addresses only */
	network_policy_set_ceiling(&c);
	assert_int_equal(create("{\"templateID\":\"base\",\"network\":{\"allowOut\":[\"example.com\",\"1.1.1.1\"],"
	                        "\"denyOut\":[\"0.0.0.0/0\",\"bad.example.com\",\"example.com\"]}}",
	                        &r, &err),
	                 0);
	assert_string_equal(r.network_json, "{\"allow\":[\"example.com\",\"1.1.1.1\"],\"deny\":[\"bad.example.com\"]}");
	create_request_release(&r);
	assert_int_equal(create("{\"templateID\":\"base\",\"allow_internet_access\":false}", &r, &err), 0);
	assert_string_equal(r.network_json, "{\"allow\":[],\"deny\":[]}");
	create_request_release(&r);
	/* Ingress options are ignored; they do not open anything. */
	assert_int_equal(
	    create("{\"templateID\":\"base\",\"network\":{\"allowPublicTraffic\":true,\"httpsPorts\":[443]}}", &r,
	           &err),
	    0);
	assert_null(r.network_json);
	create_request_release(&r);

	create_refused("{\"templateID\":\"base\",\"allow_internet_access\":true}", "whole internet");
	create_refused("{\"templateID\":\"base\",\"network\":{\"allowOut\":[\"a.com\"]}}", "whole internet");
	create_refused("{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"a.com\"]}}", "whole internet");
	create_refused(
	    "{\"templateID\":\"base\",\"network\":{\"allowOut\":[\"10.0.0.0/8\"],\"denyOut\":[\"0.0.0.0/0\"]}}",
	    "ceiling");
	create_refused(
	    "{\"templateID\":\"base\",\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"0.0.0.0/0\"]}}",
	    "ceiling");
	create_refused("{\"templateID\":\"base\",\"network\":{\"allowOut\":[1],\"denyOut\":[\"0.0.0.0/0\"]}}",
	               "arrays");
	create_refused("{\"templateID\":\"base\",\"network\":{\"nope\":1}}", "nope");
	create_refused("{\"templateID\":\"base\",\"network\":{\"rules\":{\"a.com\":[{}]}}}", "rules");
	create_refused("{\"templateID\":\"base\",\"network\":{\"egressProxy\":{\"address\":\"p:1\"}}}", "egressProxy");
	create_refused("{\"templateID\":\"base\",\"network\":[]}", "network");
	create_refused("{\"templateID\":\"base\",\"allow_internet_access\":\"no\"}", "allow_internet_access");
}

static void test_create_refused(void **state)
{
	(void)state;
	create_refused("", "templateID");
	create_refused("[]", "JSON object");
	create_refused("{\"templateID\":\"base\",\"templateID\":\"base\"}", "JSON object");
	create_refused("{\"templateID\":7}", "templateID");
	create_refused("{\"templateID\":\"Base:latest\"}", "template");
	create_refused("{\"templateID\":\"base\",\"timeout\":0}", "timeout");
	create_refused("{\"templateID\":\"base\",\"timeout\":2592001}", "timeout");
	create_refused("{\"templateID\":\"base\",\"timeout\":1.5}", "timeout");
	create_refused("{\"templateID\":\"base\",\"envVars\":{\"A B\":\"x\"}}", "env");
	create_refused("{\"templateID\":\"base\",\"metadata\":{\"k\":1}}", "metadata");
	create_refused("{\"templateID\":\"base\",\"iam\":{\"tokens\":{}}}", "iam");
	create_refused("{\"templateID\":\"base\",\"mcp\":{}}", "mcp");
	create_refused("{\"templateID\":\"base\",\"autoResume\":{\"enabled\":1}}", "autoResume");
	create_refused("{\"templateID\":\"base\",\"autoResume\":true}", "autoResume");
	create_refused("{\"templateID\":\"base\",\"volumeMounts\":[{}]}", "volumeMounts");
	create_refused("{\"templateID\":\"base\",\"autoPause\":\"yes\"}", "autoPause");
	create_refused("{\"templateID\":\"base\",\"tenant\":\"other\"}", "tenant");
}

static void test_network_update(void **state)
{
	(void)state;
	struct al_error err = {0};
	char *p = NULL;
	const char *b = "{\"allowOut\":[\"x.example.com\"],\"denyOut\":[\"0.0.0.0/0\"]}";
	assert_int_equal(e2b_network_request_parse(b, strlen(b), &p, &err), 0);
	assert_string_equal(p, "{\"allow\":[\"x.example.com\"],\"deny\":[]}");
	free(p);
	p = NULL;
	assert_int_equal(e2b_network_request_parse("", 0, &p, &err), 0);
	assert_string_equal(p, "{\"allow\":[],\"deny\":[]}");
	free(p);
	p = NULL;
	b = "{\"allow_internet_access\":true}";
	assert_int_equal(e2b_network_request_parse(b, strlen(b), &p, &err), -EINVAL);
	assert_null(p);
	b = "{\"allowOut\":[\"192.168.0.1\"],\"denyOut\":[\"0.0.0.0/0\"]}";
	assert_int_equal(e2b_network_request_parse(b, strlen(b), &p, &err), -EPERM);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "ceiling"));
	b = "{\"allowPublicTraffic\":true}";
	assert_int_equal(e2b_network_request_parse(b, strlen(b), &p, &err), -EINVAL);
}

static int list(const struct e2b_list_args *a, bool v2, struct e2b_list_query *q)
{
	struct al_error err = {0};
	int r = e2b_list_query_parse(a, v2, q, &err);
	if (r < 0)
		assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	return r;
}

static void test_list_metadata(void **state)
{
	(void)state;
	struct e2b_list_query q;
	/* {"odd key": "a&b=c+d %", "x": "y"} as the SDK sends it, once decoded by the server. */
	struct e2b_list_args a = {.metadata = "odd%2520key=a%2526b%253Dc%252Bd%2520%2525&x=y"};
	assert_int_equal(list(&a, true, &q), 0);
	assert_int_equal(q.n_meta, 2);
	assert_string_equal(q.keys[0], "odd key");
	assert_string_equal(q.values[0], "a&b=c+d %");
	assert_string_equal(q.keys[1], "x");
	assert_string_equal(q.values[1], "y");
	assert_true(q.running && q.paused && !q.asc && q.limit == E2B_LIST_LIMIT_MAX && !q.has_token);
	e2b_list_query_release(&q);
	/* '+' is a space in the form, not in the second decoding. */
	a.metadata = "k=a+b%252B";
	assert_int_equal(list(&a, true, &q), 0);
	assert_string_equal(q.values[0], "a b+");
	e2b_list_query_release(&q);

	static const char *const bad[] = {"novalue", "=v", "k=%zz", "k=%2500", "k=%", "a=1&b", "k=%25zz"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		a.metadata = bad[i];
		assert_int_equal(list(&a, true, &q), -EINVAL);
		e2b_list_query_release(&q);
	}
	char many[256] = "";
	for (int i = 0; i <= E2B_METADATA_FILTERS_MAX; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sk%d=v", i ? "&" : "", i);
	a.metadata = many;
	assert_int_equal(list(&a, true, &q), -EINVAL);
	e2b_list_query_release(&q);
}

static void test_list_args(void **state)
{
	(void)state;
	struct e2b_list_query q;
	char token[E2B_NEXT_TOKEN_MAX + 1];
	e2b_next_token_format(1733140000123, "sb-0123456789abcdef", token);
	struct e2b_list_args a = {.state = "paused",
	                          .limit = "1",
	                          .next_token = token,
	                          .order = "asc",
	                          .started_after = "2026-12-02T11:00:00.250Z",
	                          .template_name = "base"};
	assert_int_equal(list(&a, true, &q), 0);
	assert_true(!q.running && q.paused && q.asc && q.limit == 1 && q.has_token);
	assert_int_equal(q.token_ms, 1733140000123);
	assert_string_equal(q.token_id, "sb-0123456789abcdef");
	assert_int_equal(q.started_after_ms, 1796209200250);
	assert_string_equal(q.template_name, "base");
	e2b_list_query_release(&q);
	/* v1 reads only metadata and lists running ones. */
	assert_int_equal(list(&a, false, &q), 0);
	assert_true(q.running && !q.paused && !q.has_token);
	e2b_list_query_release(&q);

	static const struct e2b_list_args bad[] = {
	    {.state = "running,gone"},
	    {.state = ""},
	    {.state = ","},
	    {.limit = "0"},
	    {.limit = "101"},
	    {.limit = "-1"},
	    {.next_token = "1.sb-x"},
	    {.next_token = "x.sb-0123456789abcdef"},
	    {.next_token = ".sb-0123456789abcdef"},
	    {.next_token = "123456789012345678901.sb-0123456789abcdef"},
	    {.order = "up"},
	    {.started_after = "2026-12-02"},
	    {.started_after = "2026-12-02T11:00:00+01:00"},
	    {.started_after = "2026-13-02T11:00:00Z"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (list(&bad[i], true, &q) != -EINVAL)
			fail_msg("bad list argument %zu was accepted", i);
		e2b_list_query_release(&q);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_maps),    cmocka_unit_test(test_create_network),
	    cmocka_unit_test(test_create_refused), cmocka_unit_test(test_network_update),
	    cmocka_unit_test(test_list_metadata),  cmocka_unit_test(test_list_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
