/* SPDX-License-Identifier: Apache-2.0 */
/* The Dockerfile parser of template builds on a client's text (issue 23):
 * whatever the input, a parse ends with a result or an error, within its
 * limits, and the result's fields are whole. */
#include <stdint.h>

#include "dockerfile.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *keys[] = {"V", "TAG", "UNUSED"};
	char *values[] = {"1", "edge", "x"};
	struct kv_list args = {.n = 3, .keys = keys, .values = values};
	struct dockerfile *df = NULL;
	struct al_error err = {0};
	if (dockerfile_parse((const char *)data, size, &args, &df, &err) < 0) {
		if (!err.message[0] || df)
			abort();
		return 0;
	}
	if (!df->from || !df->from[0])
		abort();
	for (size_t i = 0; i < df->n_steps; i++) {
		const struct dockerfile_step *st = &df->steps[i];
		if (!dockerfile_step_key(st) || !st->text || strlen(st->text) > DOCKERFILE_TEXT_SHOWN + 3)
			abort();
		if (st->argv.argv && st->argv.argv[st->argv.argc])
			abort();
		if ((st->kind == DOCKERFILE_COPY || st->kind == DOCKERFILE_ADD) && (!st->n_sources || !st->dest))
			abort();
		if (st->kind == DOCKERFILE_WORKDIR && st->value[0] != '/')
			abort();
	}
	struct dockerfile_state state;
	dockerfile_state_at(df, df->n_steps, &state);
	if (!state.workdir || state.run_env.n < state.env.n)
		abort();
	dockerfile_state_release(&state);
	dockerfile_free(df);
	return 0;
}
