/* SPDX-License-Identifier: Apache-2.0 */
#include "events.h"

#include <pthread.h>
#include <sqlite3.h>
#include <time.h>

#include "json-cleanup.h"
#include "log.h"
#include "store.h"
#include "util.h"

/*
 * Two locks, always taken in this order and never the other way round:
 *   life (rwlock): read-held by every user of `db`, write-held by init and
 *     shutdown, so that the store can be closed after events_shutdown();
 *   mu (mutex) + cond: last_seq, shutdown and the retention counters, which
 *     is all a waiter looks at.
 * SQLite serializes statements on the shared connection; sequences that must
 * see their own errmsg hold sqlite3_db_mutex().
 */
static struct {
	pthread_rwlock_t life;
	sqlite3 *db;

	pthread_mutex_t mu;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	uint64_t last_seq;
	bool shutdown;
	size_t keep, prune_every, since_prune;
	size_t keep_per_sandbox;
} bus = {
    .life = PTHREAD_RWLOCK_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .keep = EVENTS_KEEP_DEFAULT,
    .keep_per_sandbox = EVENTS_KEEP_PER_SANDBOX_DEFAULT,
    .prune_every = EVENTS_PRUNE_EVERY_DEFAULT,
};

static pthread_once_t cond_once = PTHREAD_ONCE_INIT;

static void cond_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&bus.cond, &a);
	pthread_condattr_destroy(&a);
}

static const char schema[] = "CREATE TABLE IF NOT EXISTS events ("
                             " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " time_ms INTEGER NOT NULL,"
                             " type TEXT NOT NULL,"
                             " tenant TEXT,"
                             " sandbox TEXT,"
                             " data TEXT NOT NULL);"
                             "CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox, seq);";

/* Deletes all but the newest `keep` events of one sandbox. */
static int prune_sandbox(sqlite3 *db, const char *sandbox, size_t keep)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db,
	                            "DELETE FROM events WHERE sandbox = ?1 AND seq < (SELECT seq FROM events"
	                            " WHERE sandbox = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
	                            -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, sandbox, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)(keep ? keep - 1 : 0));
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : rc;
}

/*
 * SECURITY (issue 17): one sandbox's flood (its guest's denied connections
 * and DNS queries become events) must not push every other sandbox's events
 * out of the log: a sandbox keeps at most keep_per_sandbox events, its oldest
 * go first. Sandboxes over it are found with the (sandbox, seq) index.
 */
static int prune_sandboxes(sqlite3 *db, size_t keep_per_sandbox)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db,
	                            "SELECT sandbox FROM events WHERE sandbox IS NOT NULL GROUP BY sandbox"
	                            " HAVING count(*) > ?1 LIMIT 64",
	                            -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)keep_per_sandbox);
	char over[64][EVENT_SANDBOX_MAX + 1];
	size_t n = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < ARRAY_SIZE(over)) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		strlcpy_al(over[n++], id ? id : "", sizeof(over[0]));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return rc;
	for (size_t i = 0; i < n; i++)
		if ((rc = prune_sandbox(db, over[i], keep_per_sandbox)) != 0)
			return rc;
	return 0;
}

/* Deletes each sandbox's events past its share, then all but the newest
 * `keep` events. Returns 0 or a SQLite code. */
static int prune(sqlite3 *db, size_t keep, size_t keep_per_sandbox)
{
	int rc = prune_sandboxes(db, keep_per_sandbox);
	if (rc != 0)
		return rc;
	sqlite3_stmt *st = NULL;
	rc = sqlite3_prepare_v2(
	    db, "DELETE FROM events WHERE seq < (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?1)", -1, &st,
	    NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)(keep ? keep - 1 : 0));
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : rc;
}

/* The largest seq ever handed out (AUTOINCREMENT never reuses one, even after
 * pruning), so that a client's cursor stays valid across restarts. */
static int read_last_seq(sqlite3 *db, uint64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, "SELECT seq FROM sqlite_sequence WHERE name = 'events'", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	uint64_t seq = 0;
	if (rc == SQLITE_ROW)
		seq = (uint64_t)sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return rc;
	*ret = seq;
	return 0;
}

int events_init(struct store *s, struct al_error *err)
{
	pthread_once(&cond_once, cond_init);
	sqlite3 *db = store_db(s);
	pthread_mutex_lock(&bus.mu);
	size_t keep = bus.keep, keep_per_sandbox = bus.keep_per_sandbox;
	pthread_mutex_unlock(&bus.mu);
	sqlite3_mutex_enter(sqlite3_db_mutex(db));
	char *msg = NULL;
	int rc = sqlite3_exec(db, schema, NULL, NULL, &msg);
	uint64_t last = 0;
	if (rc == SQLITE_OK)
		rc = read_last_seq(db, &last);
	if (rc == SQLITE_OK)
		rc = prune(db, keep, keep_per_sandbox);
	if (rc != SQLITE_OK) {
		int r = al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot initialise the event table: %s",
		                     msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		sqlite3_mutex_leave(sqlite3_db_mutex(db));
		return r;
	}
	sqlite3_mutex_leave(sqlite3_db_mutex(db));

	pthread_rwlock_wrlock(&bus.life);
	bus.db = db;
	pthread_mutex_lock(&bus.mu);
	bus.last_seq = last;
	bus.shutdown = false;
	bus.since_prune = 0;
	pthread_mutex_unlock(&bus.mu);
	pthread_rwlock_unlock(&bus.life);
	return 0;
}

void events_shutdown(void)
{
	pthread_once(&cond_once, cond_init);
	pthread_mutex_lock(&bus.mu);
	bus.shutdown = true;
	pthread_cond_broadcast(&bus.cond);
	pthread_mutex_unlock(&bus.mu);
	/* Waits for emitters and readers that are using the connection. */
	pthread_rwlock_wrlock(&bus.life);
	bus.db = NULL;
	pthread_rwlock_unlock(&bus.life);
}

void events_set_retention(size_t keep, size_t prune_every)
{
	pthread_mutex_lock(&bus.mu);
	if (keep)
		bus.keep = keep;
	if (prune_every)
		bus.prune_every = prune_every;
	pthread_mutex_unlock(&bus.mu);
}

void events_set_sandbox_share(size_t keep_per_sandbox)
{
	pthread_mutex_lock(&bus.mu);
	if (keep_per_sandbox)
		bus.keep_per_sandbox = keep_per_sandbox;
	pthread_mutex_unlock(&bus.mu);
}

uint64_t events_last_seq(void)
{
	pthread_mutex_lock(&bus.mu);
	uint64_t seq = bus.last_seq;
	pthread_mutex_unlock(&bus.mu);
	return seq;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

/* Inserts one event; returns its seq, or 0 with *ret_msg set. */
static uint64_t insert_event(sqlite3 *db, uint64_t time_ms, const char *type, const char *tenant, const char *sandbox,
                             const char *data, char **ret_msg)
{
	sqlite3_mutex_enter(sqlite3_db_mutex(db));
	sqlite3_stmt *st = NULL;
	uint64_t seq = 0;
	int rc = sqlite3_prepare_v2(db,
	                            "INSERT INTO events (time_ms, type, tenant, sandbox, data)"
	                            " VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq",
	                            -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)time_ms);
		sqlite3_bind_text(st, 2, type, -1, SQLITE_STATIC);
		bind_text_or_null(st, 3, tenant);
		bind_text_or_null(st, 4, sandbox);
		sqlite3_bind_text(st, 5, data, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			seq = (uint64_t)sqlite3_column_int64(st, 0);
			rc = sqlite3_step(st);
		}
	}
	if (rc != SQLITE_DONE)
		seq = 0;
	if (!seq)
		*ret_msg = xstrdup(sqlite3_errmsg(db));
	sqlite3_finalize(st);
	sqlite3_mutex_leave(sqlite3_db_mutex(db));
	return seq;
}

void events_emit(const char *type, const char *tenant, const char *sandbox, json_t *data)
{
	cleanup_json json_t *d = data;
	if (!type || !*type) {
		log_error("events: dropped an event without a type (a bug)");
		return;
	}
	cleanup_free char *text = d ? json_dumps(d, JSON_COMPACT | JSON_ENCODE_ANY) : xstrdup("{}");
	if (!text) {
		log_error("events: dropped a %s event: its data cannot be encoded as JSON", type);
		return;
	}
	uint64_t now = now_ms_realtime();

	pthread_rwlock_rdlock(&bus.life);
	if (!bus.db) { /* before init or after shutdown: nobody can read it */
		pthread_rwlock_unlock(&bus.life);
		return;
	}
	cleanup_free char *msg = NULL;
	uint64_t seq = insert_event(bus.db, now, type, tenant, sandbox, text, &msg);
	if (!seq) {
		pthread_rwlock_unlock(&bus.life);
		log_error("events: dropped a %s event: %s", type, msg);
		return;
	}

	pthread_mutex_lock(&bus.mu);
	/* Concurrent emitters may get here out of order; every seq up to the
	 * largest is committed already (the connection serializes inserts). */
	if (seq > bus.last_seq)
		bus.last_seq = seq;
	pthread_cond_broadcast(&bus.cond);
	bool do_prune = ++bus.since_prune >= bus.prune_every;
	if (do_prune)
		bus.since_prune = 0;
	size_t keep = bus.keep, keep_per_sandbox = bus.keep_per_sandbox;
	pthread_mutex_unlock(&bus.mu);

	int rc = do_prune ? prune(bus.db, keep, keep_per_sandbox) : 0;
	pthread_rwlock_unlock(&bus.life);
	if (rc)
		log_error("events: pruning old events failed: %s", sqlite3_errstr(rc));
}

static json_t *row_to_json(sqlite3_stmt *st)
{
	char when[32];
	format_time_rfc3339((uint64_t)sqlite3_column_int64(st, 1), when);
	const char *data = (const char *)sqlite3_column_text(st, 5);
	json_t *d = data ? json_loads(data, JSON_DECODE_ANY, NULL) : NULL;
	return json_pack("{s:I, s:s, s:s, s:s?, s:s?, s:o}", "seq", (json_int_t)sqlite3_column_int64(st, 0), "time",
	                 when, "type", (const char *)sqlite3_column_text(st, 2), "tenant",
	                 (const char *)sqlite3_column_text(st, 3), "sandbox", (const char *)sqlite3_column_text(st, 4),
	                 "data", d ? d : json_object());
}

int events_read(const struct event_filter *f, uint64_t after_seq, size_t max, json_t **ret_array,
                uint64_t *ret_last_seq, struct al_error *err)
{
	uint64_t start = MAX(after_seq, f->since);
	if (max == 0 || max > EVENTS_READ_MAX)
		max = EVENTS_READ_MAX;
	if (start > INT64_MAX)
		start = INT64_MAX;

	/* Only constant fragments go into the SQL text; values are bound. */
	char sql[512] = "SELECT seq, time_ms, type, tenant, sandbox, data FROM events WHERE seq > ?1";
	size_t off = strlen(sql);
	if (f->sandbox)
		off += strlcpy_al(sql + off, " AND sandbox = ?2", sizeof(sql) - off);
	if (f->tenant)
		off += strlcpy_al(sql + off, " AND tenant = ?3", sizeof(sql) - off);
	if (f->type_prefix)
		off += strlcpy_al(sql + off, " AND substr(type, 1, length(?4)) = ?4", sizeof(sql) - off);
	strlcpy_al(sql + off, " ORDER BY seq LIMIT ?5", sizeof(sql) - off);

	pthread_rwlock_rdlock(&bus.life);
	sqlite3 *db = bus.db;
	if (!db) {
		pthread_rwlock_unlock(&bus.life);
		return al_error_set(err, AL_ERR_UNAVAILABLE, ESHUTDOWN,
		                    "the event log is closed: the daemon is shutting down");
	}
	/* Every seq up to this one is committed and visible to the query below. */
	uint64_t newest = events_last_seq();

	sqlite3_mutex_enter(sqlite3_db_mutex(db));
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	cleanup_json json_t *arr = json_array();
	uint64_t last = start;
	size_t n = 0;
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)start);
		if (f->sandbox)
			sqlite3_bind_text(st, 2, f->sandbox, -1, SQLITE_STATIC);
		if (f->tenant)
			sqlite3_bind_text(st, 3, f->tenant, -1, SQLITE_STATIC);
		if (f->type_prefix)
			sqlite3_bind_text(st, 4, f->type_prefix, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)max);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			json_t *ev = row_to_json(st);
			if (!ev)
				abort(); /* only allocation can fail here */
			last = (uint64_t)sqlite3_column_int64(st, 0);
			json_array_append_new(arr, ev);
			n++;
		}
	}
	int r = 0;
	if (rc != SQLITE_DONE)
		r = al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot read events: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	sqlite3_mutex_leave(sqlite3_db_mutex(db));
	pthread_rwlock_unlock(&bus.life);
	if (r < 0)
		return r;

	/* A short batch means the query saw everything up to `newest`: skip the
	 * events that did not match, so that a follower does not wake for them
	 * again. */
	if (n < max && newest > last)
		last = newest;
	*ret_array = TAKE_PTR(arr);
	*ret_last_seq = last;
	return 0;
}

int events_wait(uint64_t after_seq, uint64_t deadline_ms)
{
	pthread_once(&cond_once, cond_init);
	struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000), .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
	int r;
	pthread_mutex_lock(&bus.mu);
	for (;;) {
		if (bus.shutdown) {
			r = -ESHUTDOWN;
			break;
		}
		if (bus.last_seq > after_seq) {
			r = 0;
			break;
		}
		if (now_ms_monotonic() >= deadline_ms) {
			r = -ETIMEDOUT;
			break;
		}
		pthread_cond_timedwait(&bus.cond, &bus.mu, &ts);
	}
	pthread_mutex_unlock(&bus.mu);
	return r;
}

static bool chars_valid(const char *s, size_t max, bool (*ok)(char c))
{
	size_t n = strnlen(s, max + 1);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!ok(s[i]))
			return false;
	return true;
}

static bool type_char(char c)
{
	return (c >= 'a' && c <= 'z') || c == '.' || c == '_';
}

static bool sandbox_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int event_filter_parse_query(const char *sandbox, const char *type, const char *since, const char *follow,
                             struct event_filter *ret, bool *ret_follow, struct al_error *err)
{
	struct event_filter f = {0};
	bool fol = false;
	if (since) {
		if (parse_u64(since, &f.since) < 0 || f.since > INT64_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "since: must be the decimal seq of an event (0 to %lld), got \"%.32s\"",
			                    (long long)INT64_MAX, since);
	}
	if (type) {
		if (!chars_valid(type, EVENT_TYPE_MAX, type_char))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "type: must be 1 to %d characters of a-z, '.' and '_' (a type or a prefix such "
			    "as \"sandbox.\")",
			    EVENT_TYPE_MAX);
		f.type_prefix = type;
	}
	if (sandbox) {
		if (!chars_valid(sandbox, EVENT_SANDBOX_MAX, sandbox_char))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "sandbox: must be a sandbox id (1 to %d characters of A-Z, a-z, 0-9, '-', '_')",
			    EVENT_SANDBOX_MAX);
		f.sandbox = sandbox;
	}
	if (follow) {
		if (!strcmp(follow, "true") || !strcmp(follow, "1"))
			fol = true;
		else if (strcmp(follow, "false") && strcmp(follow, "0"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "follow: must be true or false, got \"%.16s\"", follow);
	}
	*ret = f;
	*ret_follow = fol;
	return 0;
}
