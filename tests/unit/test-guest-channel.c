/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the limits of the host side of the guest channel
 * (src/daemon/guest/guest-channel.c, issue 17): the output window enforced,
 * the logs of a sandbox bounded together,
 * results flattened and capped, watch events checked, frames of the wrong kind, late frames, unasked
 * HELLOs, and the strikes that close the channel. Frames are handed to
 * guest_channel_handle_frame as guest_channel_read would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "guest-channel.h"
#include "util.h"

struct fixture {
	int peer;
	struct guest_channel *ch;
};

static int setup(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	struct fixture *f = xcalloc(1, sizeof(*f));
	f->ch = guest_channel_new(sv[0]);
	f->peer = sv[1];
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	guest_channel_free(f->ch);
	close(f->peer);
	free(f);
	return 0;
}

static struct guest_stream *start(struct fixture *f, uint8_t type, enum guest_stream_mode mode, size_t limit)
{
	json_t *msg = json_object();
	struct guest_stream *s = NULL;
	assert_int_equal(guest_stream_start(f->ch, type, msg, mode, limit, &s, NULL), 0);
	json_decref(msg);
	return s;
}

static int frame(struct fixture *f, uint8_t type, uint32_t stream, const void *payload, size_t len)
{
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION, .type = type, .stream = stream, .length = (uint32_t)len};
	return guest_channel_handle_frame(f->ch, &h, payload);
}

static int frame_json(struct fixture *f, uint8_t type, uint32_t stream, const char *text)
{
	return frame(f, type, stream, text, strlen(text));
}

/* The stream ended with an ERROR whose code is code. */
static void assert_ended(struct fixture *f, struct guest_stream *s, uint8_t type, const char *code)
{
	uint8_t t = 0;
	json_t *res = NULL;
	assert_true(guest_stream_done(f->ch, s, &t, &res));
	assert_int_equal(t, type);
	if (code)
		assert_string_equal(json_string_value(json_object_get(res, "code")), code);
	json_decref(res);
}

static void test_window_enforced(void **state)
{
	struct fixture *f = *state;
	struct guest_stream *s = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_LOG, 0);
	/* A reader that never reads: past half the log no credit goes back,
	 * and a guest that goes on past its window is cut off. */
	struct guest_cursor cur;
	assert_int_equal(guest_cursor_open(f->ch, s, true, &cur), 0);
	static uint8_t chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	memset(chunk, 'o', sizeof(chunk));
	uint32_t id = guest_stream_id(s);
	size_t frames = 0;
	while (!guest_stream_done(f->ch, s, NULL, NULL) && frames < 1000) {
		assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, id, chunk, sizeof(chunk)), 0);
		frames++;
	}
	assert_ended(f, s, AIRLOCK_FRAME_ERROR, "guest_protocol");
	assert_int_equal(guest_channel_strikes(f->ch), 1);
	uint64_t bytes, dropped;
	guest_stream_stats(f->ch, s, &bytes, &dropped);
	/* Kept: what was credited (half the log) and one window, no more. */
	assert_true(bytes > AIRLOCK_OUTPUT_WINDOW);
	assert_true(bytes <= GUEST_LOG_CAPACITY / 2 + AIRLOCK_OUTPUT_WINDOW + sizeof(chunk));
	guest_cursor_close(f->ch, &cur);
	guest_stream_unref(f->ch, s);
}

static void test_channel_kept_budget(void **state)
{
	struct fixture *f = *state;
	/* 80 logged streams without readers, 1 MiB of output each: each keeps
	 * its log of 1 MiB until the sandbox's logs hold GUEST_CHANNEL_KEPT_MAX. */
	enum { N = 80 };
	struct guest_stream *s[N];
	static uint8_t chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	for (int i = 0; i < N; i++) {
		s[i] = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_LOG, 0);
		for (size_t sent = 0; sent < GUEST_LOG_CAPACITY; sent += sizeof(chunk))
			assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, guest_stream_id(s[i]), chunk, sizeof(chunk)),
			                 0);
	}
	uint64_t kept = 0;
	for (int i = 0; i < N; i++) {
		uint64_t bytes, dropped;
		guest_stream_stats(f->ch, s[i], &bytes, &dropped);
		assert_int_equal(bytes, GUEST_LOG_CAPACITY);
		kept += bytes - dropped;
	}
	assert_true(kept <= GUEST_CHANNEL_KEPT_MAX);
	assert_true(kept > GUEST_CHANNEL_KEPT_MAX - GUEST_LOG_CAPACITY);
	assert_int_equal(guest_channel_strikes(f->ch), 0);
	/* A stream forgotten gives its share back. */
	for (int i = 0; i < N; i++)
		guest_stream_unref(f->ch, s[i]);
	struct guest_stream *last = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_LOG, 0);
	for (size_t sent = 0; sent < GUEST_LOG_CAPACITY; sent += sizeof(chunk))
		assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, guest_stream_id(last), chunk, sizeof(chunk)), 0);
	uint64_t bytes, dropped;
	guest_stream_stats(f->ch, last, &bytes, &dropped);
	assert_int_equal(dropped, 0);
	guest_stream_unref(f->ch, last);
}

static void test_window_credited_collect(void **state)
{
	struct fixture *f = *state;
	/* A COLLECT stream credits as it receives: 4 windows are no violation,
	 * and only the limit is kept. */
	struct guest_stream *s = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_COLLECT, 1000);
	static uint8_t chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	for (size_t sent = 0; sent < 4 * AIRLOCK_OUTPUT_WINDOW; sent += sizeof(chunk))
		assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, guest_stream_id(s), chunk, sizeof(chunk)), 0);
	assert_false(guest_stream_done(f->ch, s, NULL, NULL));
	assert_int_equal(guest_channel_strikes(f->ch), 0);
	struct exec_output out[2];
	guest_stream_take_output(f->ch, s, out);
	assert_int_equal(out[0].len, 1000);
	free(out[0].data);
	free(out[1].data);
	guest_stream_unref(f->ch, s);
}

static void test_result_flattened(void **state)
{
	struct fixture *f = *state;
	struct guest_stream *s = start(f, AIRLOCK_FRAME_METRICS, GUEST_STREAM_COLLECT, 0);
	/* 100 members, a nested one, a long string: 32 scalars kept, the
	 * string cut at GUEST_RESULT_STRING_MAX. */
	char text[GUEST_RESULT_MAX];
	size_t o = (size_t)snprintf(text, sizeof(text), "{\"nested\":{\"a\":[1,2,3]},\"long\":\"");
	for (size_t i = 0; i < 3000; i++)
		text[o++] = 'L';
	o += (size_t)snprintf(text + o, sizeof(text) - o, "\"");
	for (int i = 0; i < 100; i++)
		o += (size_t)snprintf(text + o, sizeof(text) - o, ",\"k%d\":%d", i, i);
	o += (size_t)snprintf(text + o, sizeof(text) - o, "}");
	assert_int_equal(frame(f, AIRLOCK_FRAME_OK, guest_stream_id(s), text, o), 0);
	uint8_t t;
	json_t *res = NULL;
	assert_true(guest_stream_done(f->ch, s, &t, &res));
	assert_int_equal(t, AIRLOCK_FRAME_OK);
	assert_int_equal(json_object_size(res), GUEST_RESULT_MEMBERS_MAX);
	assert_null(json_object_get(res, "nested"));
	assert_int_equal(json_string_length(json_object_get(res, "long")), GUEST_RESULT_STRING_MAX);
	json_decref(res);
	guest_stream_unref(f->ch, s);
}

static void test_result_too_large(void **state)
{
	struct fixture *f = *state;
	struct guest_stream *s = start(f, AIRLOCK_FRAME_FILE_OP, GUEST_STREAM_COLLECT, 0);
	static char text[GUEST_RESULT_MAX + 100];
	memset(text, ' ', sizeof(text));
	memcpy(text, "{}", 2);
	assert_int_equal(frame(f, AIRLOCK_FRAME_ERROR, guest_stream_id(s), text, sizeof(text)), 0);
	assert_ended(f, s, AIRLOCK_FRAME_ERROR, "guest_protocol");
	assert_int_equal(guest_channel_strikes(f->ch), 1);
	guest_stream_unref(f->ch, s);
}

static void test_utf8_cut(void **state)
{
	(void)state;
	/* A string of 2-byte characters is cut on a character boundary. */
	/* "a" then 2-byte characters: the limit falls inside one. */
	char s[GUEST_RESULT_STRING_MAX * 2 + 2];
	s[0] = 'a';
	for (size_t i = 0; i < GUEST_RESULT_STRING_MAX; i++) {
		s[1 + 2 * i] = (char)0xc3;
		s[2 + 2 * i] = (char)0xa9;
	}
	s[sizeof(s) - 1] = '\0';
	json_t *j = json_pack("{s:s}", "message", s);
	assert_non_null(j);
	json_t *out = guest_result_flatten(j);
	json_t *m = json_object_get(out, "message");
	assert_non_null(m);
	assert_int_equal(json_string_length(m), GUEST_RESULT_STRING_MAX - 1);
	json_decref(out);
}

static void test_wrong_kind_and_strikes(void **state)
{
	struct fixture *f = *state;
	struct guest_stream *a = start(f, AIRLOCK_FRAME_FILE_OP, GUEST_STREAM_COLLECT, 0);
	struct guest_stream *b = start(f, AIRLOCK_FRAME_FILE_READ, GUEST_STREAM_LOG, 0);
	struct guest_stream *c = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_COLLECT, 10);
	/* EXIT on a FILE_OP, STDOUT on a FILE_READ: one strike each. */
	assert_int_equal(frame_json(f, AIRLOCK_FRAME_EXIT, guest_stream_id(a), "{\"exit_code\":0}"), 0);
	assert_ended(f, a, AIRLOCK_FRAME_ERROR, "guest_protocol");
	assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, guest_stream_id(b), "x", 1), 0);
	assert_ended(f, b, AIRLOCK_FRAME_ERROR, "guest_protocol");
	/* FILE_DATA on an exec: the third closes the channel. */
	assert_int_equal(frame(f, AIRLOCK_FRAME_FILE_DATA, guest_stream_id(c), "x", 1), -EPROTO);
	assert_int_equal(guest_channel_strikes(f->ch), GUEST_STRIKES_MAX);
	assert_ended(f, c, AIRLOCK_FRAME_ERROR, "guest_protocol");
	guest_stream_unref(f->ch, a);
	guest_stream_unref(f->ch, b);
	guest_stream_unref(f->ch, c);
}

/* WATCH_EVENTS: checked field by field; the log keeps the checked copy. */
static void test_watch_events_checked(void **state)
{
	static const char *const bad[] = {
	    "[]",
	    "{}",
	    "{\"events\":{}}",
	    "{\"events\":[{\"name\":\"../x\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"/etc/passwd\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"a//b\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"a/.\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"a/\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"a\\u0000b\",\"op\":\"create\"}]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"explode\"}]}",
	    "{\"events\":[{\"name\":3,\"op\":\"create\"}]}",
	    "{\"events\":[\"a\"]}",
	    "{\"events\":[],\"lost\":-1}",
	    "{\"events\":[],\"lost\":\"1\"}",
	    "{\"events\":[],\"started\":1}",
	    "{\"events\":[],\"events\":[]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{}}]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{\"name\":\"a\",\"type\":\"fifo\",\"size\":1,"
	    "\"mode\":420,\"uid\":0,\"gid\":0,\"mtime_ms\":1}}]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{\"name\":\"a\",\"type\":\"file\",\"size\":-1,"
	    "\"mode\":420,\"uid\":0,\"gid\":0,\"mtime_ms\":1}}]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{\"name\":\"a\",\"type\":\"file\",\"size\":1,"
	    "\"mode\":99999,\"uid\":0,\"gid\":0,\"mtime_ms\":1}}]}",
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{\"name\":\"a\",\"type\":\"file\",\"size\":1,"
	    "\"mode\":420,\"uid\":0,\"gid\":0,\"mtime_ms\":1,\"target\":7}}]}",
	};
	char why[160];
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		json_t *j = guest_watch_events_check((const uint8_t *)bad[i], strlen(bad[i]), why, sizeof(why));
		if (j)
			fail_msg("accepted: %s", bad[i]);
	}
	/* A name of GUEST_WATCH_NAME_MAX bytes passes, one more does not. */
	for (size_t n = GUEST_WATCH_NAME_MAX; n <= GUEST_WATCH_NAME_MAX + 1; n++) {
		char *text = xmalloc(n + 64);
		int len = snprintf(text, n + 64, "{\"events\":[{\"name\":\"%0*d\",\"op\":\"write\"}]}", (int)n, 7);
		json_t *j = guest_watch_events_check((const uint8_t *)text, (size_t)len, why, sizeof(why));
		assert_true((j != NULL) == (n == GUEST_WATCH_NAME_MAX));
		json_decref(j);
		free(text);
	}
	/* Too many events in one frame. */
	json_t *many = json_pack("{s:[]}", "events");
	for (int i = 0; i <= AIRLOCK_WATCH_FRAME_EVENTS_MAX; i++)
		json_array_append_new(json_object_get(many, "events"),
		                      json_pack("{s:s, s:s}", "name", "a", "op", "write"));
	char *text = json_dumps(many, JSON_COMPACT);
	assert_null(guest_watch_events_check((const uint8_t *)text, strlen(text), why, sizeof(why)));
	free(text);
	json_decref(many);

	/* A good entry is kept, with only its members. */
	const char *good =
	    "{\"events\":[{\"name\":\"a\",\"op\":\"write\",\"entry\":{\"name\":\"a\",\"type\":\"symlink\","
	    "\"size\":1,\"mode\":511,\"uid\":1000,\"gid\":1000,\"mtime_ms\":-5,\"target\":\"b\",\"x\":1}}]}";
	json_t *j = guest_watch_events_check((const uint8_t *)good, strlen(good), why, sizeof(why));
	assert_non_null(j);
	json_t *entry = json_object_get(json_array_get(json_object_get(j, "events"), 0), "entry");
	assert_int_equal(json_object_size(entry), 8);
	assert_string_equal(json_string_value(json_object_get(entry, "target")), "b");
	json_decref(j);

	/* Through the channel: extra members are not kept; a bad frame is a strike. */
	struct fixture *f = *state;
	struct guest_stream *s = start(f, AIRLOCK_FRAME_WATCH, GUEST_STREAM_LOG, 0);
	struct guest_cursor cur;
	assert_int_equal(guest_cursor_open(f->ch, s, true, &cur), 0);
	uint32_t id = guest_stream_id(s);
	assert_int_equal(frame_json(f, AIRLOCK_FRAME_WATCH_EVENTS, id,
	                            "{\"events\":[{\"name\":\"d/f\",\"op\":\"create\",\"x\":[1,2]}],\"lost\":2,"
	                            "\"junk\":{\"a\":1}}"),
	                 0);
	uint8_t type, *data = NULL;
	size_t len;
	uint64_t dropped;
	assert_int_equal(guest_cursor_read(f->ch, &cur, 0, &type, &data, &len, &dropped), 1);
	assert_int_equal(type, AIRLOCK_FRAME_WATCH_EVENTS);
	json_t *kept = json_loadb((const char *)data, len, 0, NULL);
	json_t *want = json_loads("{\"events\":[{\"name\":\"d/f\",\"op\":\"create\"}],\"lost\":2}", 0, NULL);
	assert_true(json_equal(kept, want));
	json_decref(kept);
	json_decref(want);
	free(data);
	/* WATCH_EVENTS on an exec, a malformed one on the watch: strikes. */
	struct guest_stream *e = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_COLLECT, 10);
	assert_int_equal(frame_json(f, AIRLOCK_FRAME_WATCH_EVENTS, guest_stream_id(e), "{\"events\":[]}"), 0);
	assert_ended(f, e, AIRLOCK_FRAME_ERROR, "guest_protocol");
	assert_int_equal(
	    frame_json(f, AIRLOCK_FRAME_WATCH_EVENTS, id, "{\"events\":[{\"name\":\"..\",\"op\":\"write\"}]}"), 0);
	assert_ended(f, s, AIRLOCK_FRAME_ERROR, "guest_protocol");
	assert_int_equal(guest_channel_strikes(f->ch), 2);
	guest_cursor_close(f->ch, &cur);
	guest_stream_unref(f->ch, s);
	guest_stream_unref(f->ch, e);
}

static void test_late_frames_budget(void **state)
{
	struct fixture *f = *state;
	struct guest_stream *s = start(f, AIRLOCK_FRAME_FILE_OP, GUEST_STREAM_COLLECT, 0);
	uint32_t id = guest_stream_id(s);
	assert_int_equal(frame_json(f, AIRLOCK_FRAME_OK, id, "{}"), 0);
	/* Answers after the end are dropped, within the budget. */
	for (int i = 0; i < 100; i++)
		assert_int_equal(frame_json(f, AIRLOCK_FRAME_OK, id, "{}"), 0);
	assert_int_equal(guest_channel_strikes(f->ch), 0);
	/* Frames for streams never opened: past the budget, strikes. */
	static uint8_t chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	int r = 0;
	size_t n = 0;
	while (r == 0 && n < 2 * GUEST_STRAY_BUDGET / sizeof(chunk)) {
		r = frame(f, AIRLOCK_FRAME_STDOUT, id + 1000, chunk, sizeof(chunk));
		n++;
	}
	assert_int_equal(r, -EPROTO);
	assert_true(n * sizeof(chunk) > GUEST_STRAY_BUDGET);
	guest_stream_unref(f->ch, s);
}

static void test_abandoned_stream_refills(void **state)
{
	struct fixture *f = *state;
	/* A stream the host gave up on may still send its window late. */
	static uint8_t chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	for (int round = 0; round < 40; round++) {
		struct guest_stream *s = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_COLLECT, 0);
		uint32_t id = guest_stream_id(s);
		guest_stream_unref(f->ch, s);
		for (size_t sent = 0; sent < AIRLOCK_OUTPUT_WINDOW; sent += sizeof(chunk))
			assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, id, chunk, sizeof(chunk)), 0);
		assert_int_equal(frame_json(f, AIRLOCK_FRAME_EXIT, id, "{\"exit_code\":0}"), 0);
	}
	assert_int_equal(guest_channel_strikes(f->ch), 0);
}

static void test_hellos(void **state)
{
	struct fixture *f = *state;
	const char *hello = "{\"proto\":1,\"agent\":\"t\"}";
	/* Asked-for HELLOs are never a violation. */
	for (int i = 0; i < 20; i++) {
		guest_channel_request_hello(f->ch);
		assert_int_equal(frame_json(f, AIRLOCK_FRAME_HELLO, 0, hello), 0);
	}
	int r = 0, n = 0;
	while (r == 0 && n < 100) {
		r = frame_json(f, AIRLOCK_FRAME_HELLO, 0, hello);
		n++;
	}
	assert_int_equal(r, -EPROTO);
	assert_int_equal(n, GUEST_UNASKED_MAX + GUEST_STRIKES_MAX);
}

static void test_stream0_errors_asked(void **state)
{
	struct fixture *f = *state;
	/* RESIZE to an exec without a PTY draws an ERROR on stream 0 from a
	 * real agent: as many as the host sent such frames are no violation. */
	struct guest_stream *s = start(f, AIRLOCK_FRAME_EXEC, GUEST_STREAM_COLLECT, 0);
	json_t *msg = json_pack("{s:i, s:i}", "rows", 24, "cols", 80);
	const char *err = "{\"code\":\"enotty\",\"errno\":25,\"message\":\"no pty\"}";
	for (int i = 0; i < 40; i++) {
		assert_int_equal(guest_stream_send_control(f->ch, s, AIRLOCK_FRAME_RESIZE, msg), 0);
		assert_int_equal(frame_json(f, AIRLOCK_FRAME_ERROR, 0, err), 0);
	}
	assert_int_equal(guest_channel_strikes(f->ch), 0);
	/* Unasked ones: GUEST_UNASKED_MAX, then strikes. */
	int r = 0, n = 0;
	while (r == 0 && n < 100) {
		r = frame_json(f, AIRLOCK_FRAME_ERROR, 0, err);
		n++;
	}
	assert_int_equal(r, -EPROTO);
	assert_int_equal(n, GUEST_UNASKED_MAX + GUEST_STRIKES_MAX);
	json_decref(msg);
	guest_stream_unref(f->ch, s);
}

static void test_stream0_output(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(frame(f, AIRLOCK_FRAME_STDOUT, 0, "x", 1), 0);
	assert_int_equal(frame(f, AIRLOCK_FRAME_EXIT, 0, "{}", 2), 0);
	assert_int_equal(frame(f, AIRLOCK_FRAME_FILE_DATA, 0, "x", 1), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_window_enforced, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_window_credited_collect, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_channel_kept_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_result_flattened, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_result_too_large, setup, teardown),
	    cmocka_unit_test(test_utf8_cut),
	    cmocka_unit_test_setup_teardown(test_wrong_kind_and_strikes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_watch_events_checked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_late_frames_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abandoned_stream_refills, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hellos, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stream0_errors_asked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stream0_output, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
