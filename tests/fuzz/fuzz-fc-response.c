/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the parser of Firecracker's API answers
 * (fc_response_parse in src/daemon/vmm/firecracker/fc-api.c). Firecracker runs next to a
 * hostile guest, so its answers are parsed as untrusted input.
 *
 * Checks, beyond the sanitizers:
 *  - an accepted answer took at most the input and at most FC_RESPONSE_MAX
 *    bytes, has a status from 200 to 599, a body that is NULL or a JSON
 *    object, and a fault message of printable ASCII;
 *  - feeding the bytes in pieces cannot change the outcome: the accepted
 *    prefix alone gives the same answer, and a shorter prefix asks for more.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fc-api.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-fc-response: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct fc_response r = {0};
	size_t used = 0;
	char why[256];
	int rc = fc_response_parse(buf, size, &r, &used, why, sizeof(why));
	CHECK(rc == 1 || rc == 0 || rc == -EBADMSG || rc == -EMSGSIZE || rc == -EPROTO);
	if (rc < 0)
		CHECK(why[0] != '\0');
	if (rc != 1)
		return 0;
	CHECK(used >= 4 && used <= size && used <= FC_RESPONSE_MAX);
	CHECK(r.status >= 200 && r.status <= 599);
	CHECK(r.body == NULL || json_is_object(r.body));
	for (const char *p = r.fault; *p; p++)
		CHECK(*p >= 0x20 && *p < 0x7f);

	struct fc_response again = {0};
	size_t used2 = 0;
	CHECK(fc_response_parse(buf, used, &again, &used2, why, sizeof(why)) == 1);
	CHECK(used2 == used && again.status == r.status && again.deprecated == r.deprecated);
	CHECK((again.body == NULL) == (r.body == NULL));
	CHECK(!r.body || json_equal(again.body, r.body));
	fc_response_release(&again);

	struct fc_response shorter = {0};
	CHECK(fc_response_parse(buf, used - 1, &shorter, &used2, why, sizeof(why)) <= 0);
	fc_response_release(&shorter);
	fc_response_release(&r);
	return 0;
}
