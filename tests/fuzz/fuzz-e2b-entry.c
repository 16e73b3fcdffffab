/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for E2B's filesystem entries (src/daemon/api/api-e2b-entry.c),
 * fed with what a hostile guest or client controls:
 *
 *   e2b_accounts_name()  the guest's /etc/passwd and /etc/group, searched for ids
 *   e2b_entry_info()     the agent's stat object (any JSON object)
 *   e2b_path_clean()     a resolved path (the client's)
 *
 * Each input goes to all three. Beyond the sanitizers it checks that a name
 * fits its buffer and is UTF-8, that an entry is always made with the fields
 * the SDK reads, and that a cleaned path is absolute, no longer than its
 * input plus one, and has no ".", ".." or empty component left.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-e2b-entry.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-e2b-entry: check failed: %s (line %d)\n", #cond, __LINE__);              \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void fuzz_accounts(const char *text)
{
	static const unsigned ids[] = {0, 1, 7, 1000, 65534, 4294967294u};
	for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
		char out[16];
		e2b_accounts_name(text, ids[i], out, sizeof(out));
		CHECK(strlen(out) < sizeof(out));
		CHECK(out[0] != '\0');
		CHECK(utf8_valid((const uint8_t *)out, strlen(out)));
	}
}

static void fuzz_entry(const uint8_t *data, size_t size, const char *text)
{
	json_t *st = json_loadb((const char *)data, size, 0, NULL);
	if (!json_is_object(st)) {
		json_decref(st);
		st = json_object();
	}
	json_t *e = e2b_entry_info(st, "/some/dir/name", text, text);
	CHECK(e != NULL);
	static const char *const strings[] = {"name",        "type",  "path",  "size",
	                                      "permissions", "owner", "group", "modifiedTime"};
	for (size_t i = 0; i < ARRAY_SIZE(strings); i++)
		CHECK(json_is_string(json_object_get(e, strings[i])));
	CHECK(json_is_integer(json_object_get(e, "mode")));
	json_decref(e);
	json_decref(st);
}

static void fuzz_path(const char *path)
{
	size_t n = strlen(path);
	char *out = xmalloc(n + 2);
	e2b_path_clean(path, out);
	CHECK(out[0] == '/');
	CHECK(strlen(out) <= n + 1);
	CHECK(!strstr(out, "//") && !strstr(out, "/./") && !strstr(out, "/../"));
	size_t m = strlen(out);
	CHECK(m == 1 || out[m - 1] != '/');
	CHECK(!(m >= 2 && !strcmp(out + m - 2, "/.")) && !(m >= 3 && !strcmp(out + m - 3, "/..")));
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0'; /* as the reader hands it over: NUL-terminated, maybe with NULs inside */
	fuzz_accounts(text);
	fuzz_entry(data, size, text);
	fuzz_path(text);
	free(text);
	return 0;
}
