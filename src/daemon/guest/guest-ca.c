/* SPDX-License-Identifier: Apache-2.0 */
#include "guest-ca.h"

#include "airlock/proto.h"
#include "ca.h"
#include "json-cleanup.h"
#include "util.h"

#define GUEST_CA_OUTPUT_MAX 4096
#define GUEST_CA_EXEC_TIMEOUT_S 30

/* Boot failures are what a failed step is: the sandbox does not start. */
static int failed(struct al_error *err, const char *what)
{
	err->code = AL_ERR_BOOT_FAILED;
	al_error_prefix(err, "installing the Airlock CA in the guest (%s)", what);
	return -EIO;
}

/* FILE_OP stat: 1 when path exists as a file (or a symlink to one), 0 when
 * it does not, < 0 on failure. */
static int guest_file_exists(struct guest_channel *ch, const char *path, uint64_t deadline, struct al_error *err)
{
	cleanup_json json_t *msg = json_pack("{s:s, s:s}", "op", "stat", "path", path);
	cleanup_json json_t *st = NULL;
	int r = guest_channel_call(ch, AIRLOCK_FRAME_FILE_OP, msg, deadline, "stat", &st, err);
	if (r < 0)
		return err->code == AL_ERR_NOT_FOUND ? 0 : r;
	const char *type = json_string_value(json_object_get(st, "type"));
	return type && (!strcmp(type, "file") || !strcmp(type, "symlink"));
}

static int guest_mkdir_p(struct guest_channel *ch, const char *path, uint64_t deadline, struct al_error *err)
{
	cleanup_json json_t *msg =
	    json_pack("{s:s, s:s, s:b, s:i}", "op", "mkdir", "path", path, "parents", 1, "mode", 0755);
	return guest_channel_call(ch, AIRLOCK_FRAME_FILE_OP, msg, deadline, "mkdir", NULL, err);
}

/* FILE_WRITE of a small file (temp file and rename in the guest). */
static int guest_write(struct guest_channel *ch, const char *path, unsigned mode, const char *data, size_t len,
                       uint64_t deadline, struct al_error *err)
{
	cleanup_json json_t *msg = json_pack("{s:s, s:I}", "path", path, "mode", (json_int_t)mode);
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_FILE_WRITE, msg, GUEST_STREAM_COLLECT, 0, &s, err);
	if (r < 0)
		return r;
	r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_FILE_DATA, data, len, deadline);
	if (r == 0)
		r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_FILE_DATA, NULL, 0, deadline);
	if (r == 0 || r == -EPIPE)
		r = guest_stream_wait_done(ch, s, deadline);
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	if (r == 0)
		guest_stream_done(ch, s, &type, &result);
	guest_stream_unref(ch, s);
	if (r < 0)
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		                    "the guest agent did not finish writing %s", path);
	return type == AIRLOCK_FRAME_OK ? 0 : guest_result_to_error(result, "the write", err);
}

int guest_run_internal(struct guest_channel *ch, char **argv, size_t argc, uint64_t deadline, struct al_error *err)
{
	struct exec_request er = {.argc = argc,
	                          .argv = argv,
	                          .cwd = "/",
	                          .timeout_s = GUEST_CA_EXEC_TIMEOUT_S,
	                          .max_output_bytes = GUEST_CA_OUTPUT_MAX};
	cleanup_json json_t *msg = guest_exec_message(&er, NULL, 0);
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_EXEC, msg, GUEST_STREAM_COLLECT, GUEST_CA_OUTPUT_MAX, &s, err);
	if (r < 0)
		return r;
	r = guest_stream_wait_done(ch, s, deadline);
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	struct exec_output out[2] = {0};
	if (r == 0) {
		guest_stream_done(ch, s, &type, &result);
		guest_stream_take_output(ch, s, out);
	}
	guest_stream_unref(ch, s);
	struct exec_exit ex;
	if (r < 0)
		r = al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		                 "the guest agent did not finish %s", argv[0]);
	else if ((r = guest_result_to_exit(type, result, &ex, err)) == 0 && (!ex.exited || ex.exit_code != 0))
		r = al_error_set(err, AL_ERR_GUEST, EIO, "%s failed (%s %d): %.*s", argv[0],
		                 ex.exited ? "exit status" : "signal", ex.exited ? ex.exit_code : ex.signal,
		                 (int)MIN(out[1].len, (size_t)300), out[1].data ? (const char *)out[1].data : "");
	free(out[0].data);
	free(out[1].data);
	return r;
}

/* The first base64 line of the certificate: what tells a bundle that has it
 * (it holds the random serial). */
static char *pem_marker(const char *pem)
{
	const char *nl = strchr(pem, '\n');
	const char *end = nl ? strchr(nl + 1, '\n') : NULL;
	if (!nl || !end || end - nl < 20)
		return NULL;
	return xstrndup(nl + 1, (size_t)(end - nl - 1));
}

int guest_ca_install(struct guest_channel *ch, const char *cert_pem, uint64_t deadline_ms, char *ret_bundle,
                     size_t size, struct al_error *err)
{
	cleanup_free char *marker = pem_marker(cert_pem);
	if (!marker)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "the Airlock CA certificate is not PEM");
	int has_bundle = guest_file_exists(ch, CA_GUEST_SYSTEM_BUNDLE, deadline_ms, err);
	if (has_bundle < 0)
		return failed(err, "stat " CA_GUEST_SYSTEM_BUNDLE);
	size_t len = strlen(cert_pem);
	if (guest_mkdir_p(ch, "/usr/local/share/ca-certificates", deadline_ms, err) < 0 ||
	    guest_write(ch, CA_GUEST_CERT, 0644, cert_pem, len, deadline_ms, err) < 0)
		return failed(err, CA_GUEST_CERT);
	if (has_bundle) {
		/* Appended once; the marker line is passed as an argument, never
		 * spliced into the script. */
		char *argv[] = {"sh",
		                "-c",
		                "grep -qxF -- \"$2\" \"$1\" || { echo; cat \"$3\"; } >> \"$1\"",
		                "sh",
		                CA_GUEST_SYSTEM_BUNDLE,
		                marker,
		                CA_GUEST_CERT,
		                NULL};
		if (guest_run_internal(ch, argv, 7, deadline_ms, err) < 0)
			return failed(err, "appending to " CA_GUEST_SYSTEM_BUNDLE);
		strlcpy_al(ret_bundle, CA_GUEST_SYSTEM_BUNDLE, size);
		return 0;
	}
	if (guest_mkdir_p(ch, "/etc/airlock", deadline_ms, err) < 0 ||
	    guest_write(ch, CA_GUEST_OWN_BUNDLE, 0644, cert_pem, len, deadline_ms, err) < 0)
		return failed(err, CA_GUEST_OWN_BUNDLE);
	strlcpy_al(ret_bundle, CA_GUEST_OWN_BUNDLE, size);
	return 0;
}
