/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the shared access to the store's connection
 * (src/daemon/store/store-db.c) on an in-memory SQLite database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "store-db.h"
#include "util.h"

/* An in-memory database and a handle on it, set (setup) and cleared (teardown). */
struct fixture {
	sqlite3 *db;
	struct db_conn c;
};

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	f->c = (struct db_conn)DB_CONN_INIT("widgets");
	if (sqlite3_open_v2(":memory:", &f->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK)
		return -1;
	db_conn_set(&f->c, f->db);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	db_conn_set(&f->c, NULL);
	sqlite3_close(f->db);
	free(f);
	return 0;
}

static void *mutex_free(void *arg)
{
	sqlite3_mutex *m = arg;
	if (sqlite3_mutex_try(m) != SQLITE_OK)
		return NULL;
	sqlite3_mutex_leave(m);
	return m;
}

/* Neither `life` nor the connection's mutex is held (the mutex is recursive:
 * another thread tries it). */
static bool not_held(struct db_conn *c)
{
	if (pthread_rwlock_trywrlock(&c->life) != 0)
		return false;
	pthread_rwlock_unlock(&c->life);
	if (!c->db)
		return true;
	pthread_t t;
	void *free_ = NULL;
	assert_int_equal(pthread_create(&t, NULL, mutex_free, sqlite3_db_mutex(c->db)), 0);
	pthread_join(t, &free_);
	return free_ != NULL;
}

static void test_closed_before_set_and_after_clear(void **state)
{
	struct fixture *f = *state;
	struct db_query q = {0};
	struct al_error err = {0};
	db_conn_set(&f->c, NULL);
	assert_int_equal(db_query_prepare(&f->c, "SELECT 1", "count widgets", &q, &err), -ESHUTDOWN);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	assert_string_equal(err.message, "widgets are unavailable: the daemon is shutting down");
	assert_null(q.conn);
	assert_true(not_held(&f->c));

	db_conn_set(&f->c, f->db);
	assert_int_equal(db_query_prepare(&f->c, "SELECT nope FROM nowhere", "count widgets", &q, &err), -EIO);
	assert_true(not_held(&f->c)); /* a failed prepare let go of everything */
}

static void test_query_steps_and_releases(void **state)
{
	struct fixture *f = *state;
	struct al_error err = {0};
	assert_int_equal(
	    db_exec(f->db, "CREATE TABLE w (name TEXT); INSERT INTO w VALUES ('a'), (NULL)", "create w", &err), 0);
	{
		cleanup_db_query struct db_query q = {0};
		assert_int_equal(db_query_prepare(&f->c, "SELECT name FROM w ORDER BY rowid", "list widgets", &q, &err),
		                 0);
		assert_ptr_equal(q.conn, &f->c);
		assert_int_equal(sqlite3_step(q.stmt), SQLITE_ROW);
		assert_string_equal(db_column_text(q.stmt, 0), "a");
		assert_int_equal(sqlite3_step(q.stmt), SQLITE_ROW);
		assert_string_equal(db_column_text(q.stmt, 0), ""); /* NULL reads as "" */
		assert_int_equal(sqlite3_step(q.stmt), SQLITE_DONE);
		assert_false(not_held(&f->c));
	}
	assert_true(not_held(&f->c));
}

static void test_errors_name_what_failed(void **state)
{
	struct fixture *f = *state;
	struct al_error err = {0};
	struct db_query q = {0};
	assert_int_equal(db_query_prepare(&f->c, "SELECT nope FROM nowhere", "list widgets", &q, &err), -EIO);
	assert_int_equal(err.code, AL_ERR_INTERNAL);
	assert_string_equal(err.message, "state store: list widgets: no such table: nowhere");
	assert_null(q.conn);
	db_query_finish(&q); /* a zeroed query: nothing to let go of */

	assert_int_equal(db_exec(f->db, "CREATE TABLE", "create the widget table", &err), -EIO);
	assert_non_null(strstr(err.message, "cannot create the widget table: "));

	cleanup_stmt sqlite3_stmt *st = NULL;
	assert_int_equal(db_prepare(f->db, "SELECT * FROM nowhere", "get widget", &st, &err), -EIO);
	assert_null(st);
	assert_string_equal(err.message, "state store: get widget: no such table: nowhere");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_closed_before_set_and_after_clear, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_query_steps_and_releases, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_errors_name_what_failed, setup, teardown),
	};
	return cmocka_run_group_tests_name("store-db", tests, NULL, NULL);
}
