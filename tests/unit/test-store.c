/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the state store (src/daemon/store/store-sqlite.c) on a real
 * SQLite file in a temporary directory. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "store.h"
#include "util.h"

static char dir[PATH_MAX];
static char db[PATH_MAX + 16];

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-store-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(db, sizeof(db), "%s/airlock.db", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return rm_rf(dir);
}

static struct sandbox_record record(const char *id, enum sandbox_state st, uint64_t created_ms)
{
	struct sandbox_record r = {
	    .state = st,
	    .vcpus = 2,
	    .memory_mib = 512,
	    .env_json = (char *)"{\"A\":\"1\"}",
	    .metadata_json = (char *)"{\"owner\":\"alice\"}",
	    .created_ms = created_ms,
	    .updated_ms = created_ms + 5,
	    .boot_ms = -1,
	    .error = NULL,
	    .vmm_pid = 0,
	};
	strlcpy_al(r.id, id, sizeof(r.id));
	strlcpy_al(r.template_name, "minimal", sizeof(r.template_name));
	strlcpy_al(r.backend, "qemu", sizeof(r.backend));
	strlcpy_al(r.accel, "tcg", sizeof(r.accel));
	return r;
}

static void test_state_names(void **state)
{
	(void)state;
	const char *names[] = {"creating", "running", "stopping", "stopped",
	                       "error",    "deleted", "paused",   "snapshotting"};
	assert_int_equal(ARRAY_SIZE(names), SANDBOX_STATE_COUNT);
	for (int i = 0; i < SANDBOX_STATE_COUNT; i++) {
		assert_string_equal(sandbox_state_name((enum sandbox_state)i), names[i]);
		enum sandbox_state s;
		assert_int_equal(sandbox_state_from_name(names[i], &s), 0);
		assert_int_equal(s, i);
	}
	enum sandbox_state s = SANDBOX_RUNNING;
	assert_true(sandbox_state_from_name("frozen", &s) < 0);
	assert_true(sandbox_state_from_name("", &s) < 0);
	assert_int_equal(s, SANDBOX_RUNNING);
}

static void test_insert_get_update(void **state)
{
	(void)state;
	struct store *s = NULL;
	struct al_error err = {0};
	assert_int_equal(store_open(db, &s, &err), 0);
	struct sandbox_record r = record("sb-00000000000000a1", SANDBOX_CREATING, 1000);
	assert_int_equal(store_sandbox_insert(s, &r, &err), 0);
	assert_int_equal(store_sandbox_insert(s, &r, &err), -EEXIST);

	struct sandbox_record got = {0};
	assert_int_equal(store_sandbox_get(s, r.id, &got, &err), 0);
	assert_string_equal(got.id, r.id);
	assert_int_equal(got.state, SANDBOX_CREATING);
	assert_string_equal(got.template_name, "minimal");
	assert_int_equal(got.vcpus, 2);
	assert_int_equal(got.memory_mib, 512);
	assert_string_equal(got.env_json, r.env_json);
	assert_string_equal(got.metadata_json, r.metadata_json);
	assert_string_equal(got.backend, "qemu");
	assert_string_equal(got.accel, "tcg");
	assert_true(got.created_ms == 1000 && got.updated_ms == 1005);
	assert_true(got.boot_ms == -1);
	assert_null(got.error);
	assert_string_equal(got.guest_mac, "");
	assert_false(got.auto_resume);
	assert_int_equal(got.n_ports, 0);
	sandbox_record_release(&got);

	/* Every field is written by update. */
	r.state = SANDBOX_ERROR;
	r.error = (char *)"boot failed: Kernel panic - not syncing\nline two";
	r.boot_ms = 2143;
	r.vmm_pid = 4242;
	r.updated_ms = 9999;
	strlcpy_al(r.guest_mac, "02:1a:2b:3c:4d:5e", sizeof(r.guest_mac));
	r.auto_resume = true;
	/* Every exposed port, in order, with whether it is public. */
	r.n_ports = SANDBOX_RECORD_PORTS_MAX;
	for (unsigned i = 0; i < r.n_ports; i++)
		r.ports[i] = (struct sandbox_port){.port = (uint16_t)(65535 - i * 3), .public_port = i % 2 == 1};
	assert_int_equal(store_sandbox_update(s, &r, &err), 0);
	assert_int_equal(store_sandbox_get(s, r.id, &got, &err), 0);
	assert_int_equal(got.state, SANDBOX_ERROR);
	assert_string_equal(got.guest_mac, "02:1a:2b:3c:4d:5e");
	assert_true(got.auto_resume);
	assert_int_equal(got.n_ports, SANDBOX_RECORD_PORTS_MAX);
	for (unsigned i = 0; i < got.n_ports; i++) {
		assert_int_equal(got.ports[i].port, 65535 - i * 3);
		assert_int_equal(got.ports[i].public_port, i % 2 == 1);
	}
	assert_string_equal(got.error, r.error);
	assert_true(got.boot_ms == 2143 && got.vmm_pid == 4242 && got.updated_ms == 9999);
	sandbox_record_release(&got);

	struct sandbox_record none = record("sb-00000000000000ff", SANDBOX_RUNNING, 1);
	assert_int_equal(store_sandbox_update(s, &none, &err), -ENOENT);
	memset(&got, 0x5a, sizeof(got));
	struct sandbox_record before = got;
	assert_int_equal(store_sandbox_get(s, none.id, &got, &err), -ENOENT);
	assert_memory_equal(&got, &before, sizeof(got));
	store_close(s);
}

/* A fork's copies name its snapshot until the fork is done; finishing it
 * clears every one of them at once, and only theirs. */
static void test_fork_of(void **state)
{
	(void)state;
	struct store *s = NULL;
	struct al_error err = {0};
	assert_int_equal(store_open(db, &s, &err), 0);
	const char *ids[] = {"sb-00000000000000b1", "sb-00000000000000b2", "sb-00000000000000b3"};
	for (int i = 0; i < 3; i++) {
		struct sandbox_record r = record(ids[i], SANDBOX_RUNNING, 2000 + (uint64_t)i);
		strlcpy_al(r.fork_of, i < 2 ? "snap-00000000000000f1" : "snap-00000000000000f2", sizeof(r.fork_of));
		assert_int_equal(store_sandbox_insert(s, &r, &err), 0);
	}
	struct sandbox_record got = {0};
	assert_int_equal(store_sandbox_get(s, ids[1], &got, &err), 0);
	assert_string_equal(got.fork_of, "snap-00000000000000f1");
	sandbox_record_release(&got);
	assert_int_equal(store_fork_finish(s, "snap-00000000000000f1", &err), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(store_sandbox_get(s, ids[i], &got, &err), 0);
		assert_string_equal(got.fork_of, i < 2 ? "" : "snap-00000000000000f2");
		assert_int_equal(got.state, SANDBOX_RUNNING);
		sandbox_record_release(&got);
	}
	/* A fork nobody names: nothing changes, no error. */
	assert_int_equal(store_fork_finish(s, "snap-00000000000000f9", &err), 0);
	store_close(s);
}

/* Writers on the one shared connection, as the daemon's threads are: an
 * update's "no such sandbox" must come from its own statement, never from
 * another thread's that ran between its step and the count of changed rows. */
struct writer {
	struct store *s;
	struct sandbox_record r;
	int want; /* what every update returns */
	int wrong;
};

#define WRITER_ROUNDS 1500

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	for (int i = 0; i < WRITER_ROUNDS; i++) {
		struct al_error err = {0};
		w->r.updated_ms = (uint64_t)i;
		if (store_sandbox_update(w->s, &w->r, &err) != w->want)
			w->wrong++;
	}
	return NULL;
}

static void test_concurrent_updates(void **state)
{
	(void)state;
	struct store *s = NULL;
	struct al_error err = {0};
	assert_int_equal(store_open(db, &s, &err), 0);
	struct writer w[3] = {
	    {s, record("sb-00000000000000b1", SANDBOX_RUNNING, 1), 0, 0},
	    {s, record("sb-00000000000000b2", SANDBOX_RUNNING, 2), 0, 0},
	    {s, record("sb-00000000000000b3", SANDBOX_RUNNING, 3), -ENOENT, 0}, /* never inserted */
	};
	assert_int_equal(store_sandbox_insert(s, &w[0].r, &err), 0);
	assert_int_equal(store_sandbox_insert(s, &w[1].r, &err), 0);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		if (w[i].wrong)
			fail_msg("writer %d: %d of %d updates got the wrong answer", i, w[i].wrong, WRITER_ROUNDS);
	}
	store_close(s);
}

static void test_list_and_persistence(void **state)
{
	(void)state;
	struct store *s = NULL;
	struct al_error err = {0};
	assert_int_equal(store_open(db, &s, &err), 0);
	const char *ids[] = {"sb-0000000000000001", "sb-0000000000000002", "sb-0000000000000003"};
	for (int i = 0; i < 3; i++) {
		struct sandbox_record r =
		    record(ids[i], i == 1 ? SANDBOX_DELETED : SANDBOX_RUNNING, 1000u + (unsigned)i);
		assert_int_equal(store_sandbox_insert(s, &r, &err), 0);
	}
	store_close(s);

	/* Reopened: the records survived, newest first, deleted ones on request. */
	assert_int_equal(store_open(db, &s, &err), 0);
	struct sandbox_record *list = NULL;
	size_t n = 0;
	assert_int_equal(store_sandbox_list(s, false, &list, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].id, ids[2]);
	assert_string_equal(list[1].id, ids[0]);
	for (size_t i = 0; i < n; i++)
		sandbox_record_release(&list[i]);
	free(list);
	assert_int_equal(store_sandbox_list(s, true, &list, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_string_equal(list[0].id, ids[2]);
	assert_string_equal(list[1].id, ids[1]);
	assert_int_equal(list[1].state, SANDBOX_DELETED);
	assert_string_equal(list[2].id, ids[0]);
	for (size_t i = 0; i < n; i++)
		sandbox_record_release(&list[i]);
	free(list);
	store_close(s);
}

static void test_record_copy(void **state)
{
	(void)state;
	struct sandbox_record r = record("sb-00000000000000c0", SANDBOX_ERROR, 5);
	r.error = (char *)"why";
	struct sandbox_record c;
	sandbox_record_copy(&c, &r);
	assert_string_equal(c.id, r.id);
	assert_ptr_not_equal(c.env_json, r.env_json);
	assert_string_equal(c.env_json, r.env_json);
	assert_ptr_not_equal(c.error, r.error);
	assert_string_equal(c.error, "why");
	sandbox_record_release(&c);
}

static void test_open_fails_with_a_message(void **state)
{
	(void)state;
	struct store *s = NULL;
	struct al_error err = {0};
	char bad[PATH_MAX + 32];
	snprintf(bad, sizeof(bad), "%s/no/such/dir/airlock.db", dir);
	assert_true(store_open(bad, &s, &err) < 0);
	assert_null(s);
	assert_true(err.message[0] != '\0');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_state_names),
	    cmocka_unit_test_setup_teardown(test_insert_get_update, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fork_of, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_updates, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list_and_persistence, setup, teardown),
	    cmocka_unit_test(test_record_copy),
	    cmocka_unit_test_setup_teardown(test_open_fails_with_a_message, setup, teardown),
	};
	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
