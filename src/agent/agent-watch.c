/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WATCH streams: a directory watched with inotify (proto.h).
 *
 * Each WATCH stream has its own inotify instance (s->file_fd) and a table
 * of its watches (watch descriptor -> directory relative to the watched
 * one). With "recursive" every subdirectory is watched too: at the start by
 * a walk, later as IN_CREATE / IN_MOVED_TO of a directory arrive; a new
 * directory is then scanned, and what is already in it is reported as
 * created (it may have been filled before its watch existed). A directory
 * moved away or removed loses its watches. The walks do not enter other
 * filesystems (mount points below the root).
 *
 * Events wait in a per-stream queue (at most AIRLOCK_WATCH_QUEUE_MAX; the
 * same event twice in a row is kept once) and go out as WATCH_EVENTS frames
 * within the stream's output window, like a listing. Nothing is dropped
 * silently: an event that finds the queue full, a kernel queue overflow
 * (IN_Q_OVERFLOW) and a directory left unwatched at the sandbox's limit of
 * AIRLOCK_WATCH_WATCHES_MAX are counted and reported in the next frame
 * ("lost", "unwatched"). While the queue is full the inotify fd is not read
 * (the kernel queues, then overflows, which is reported too).
 *
 * The stream ends with OK when the host cancels it (SIGNAL) or the watched
 * directory goes away, and, like every stream but an exec, when the host
 * disconnects or a THAW orphans it (agent_stream_free -> agent_watch_free).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "json-cleanup.h"
#include "util.h"

#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF)

enum watch_op { WATCH_CREATE, WATCH_WRITE, WATCH_REMOVE, WATCH_RENAME, WATCH_CHMOD };
static const char *const watch_op_names[] = {"create", "write", "remove", "rename", "chmod"};

struct watch_dir {
	int wd;
	char *rel; /* "" for the watched directory itself */
};

struct watch_event {
	enum watch_op op;
	char *name;
};

struct watch {
	char *root; /* the watched directory's path, without a trailing slash (but "/") */
	bool recursive;
	dev_t dev;    /* the root's filesystem: the recursive walk stays on it */
	bool entries; /* each create/write/chmod event carries the stat of its path, as sent */
	struct watch_dir *dirs;
	size_t n_dirs, cap_dirs;
	struct watch_event *queue; /* ring of AIRLOCK_WATCH_QUEUE_MAX */
	size_t q_head, q_len;
	uint64_t lost, unwatched, sent;
	bool ending; /* the watched directory is gone: OK once the queue is out */
};

/* Watches of every WATCH stream together (AIRLOCK_WATCH_WATCHES_MAX). */
static size_t watches_total;

static struct watch_dir *dir_by_wd(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->n_dirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static void dir_forget(struct watch *w, size_t i)
{
	free(w->dirs[i].rel);
	w->dirs[i] = w->dirs[--w->n_dirs];
	watches_total--;
}

static void queue_push(struct watch *w, enum watch_op op, const char *name)
{
	if (w->q_len > 0) {
		/* The same event again (a file written in many pieces) is one. */
		struct watch_event *last = &w->queue[(w->q_head + w->q_len - 1) % AIRLOCK_WATCH_QUEUE_MAX];
		if (last->op == op && !strcmp(last->name, name))
			return;
	}
	if (w->q_len >= AIRLOCK_WATCH_QUEUE_MAX) {
		w->lost++;
		return;
	}
	struct watch_event *e = &w->queue[(w->q_head + w->q_len) % AIRLOCK_WATCH_QUEUE_MAX];
	e->op = op;
	e->name = xstrdup(name);
	w->q_len++;
}

/* rel joined to name ("" + "x" = "x"); false when it is too long. */
static bool rel_join(const char *rel, const char *name, char out[PATH_MAX])
{
	int n = snprintf(out, PATH_MAX, "%s%s%s", rel, *rel ? "/" : "", name);
	return n > 0 && n < PATH_MAX;
}

/* Watches root/rel. 1 when added, 0 when it was already watched or is not a
 * directory any more, < 0 on error; at the limit it is counted unwatched. */
static int dir_add(struct watch *w, int ifd, const char *rel)
{
	if (watches_total >= AIRLOCK_WATCH_WATCHES_MAX) {
		w->unwatched++;
		return 0;
	}
	char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s%s%s", w->root, *rel && strcmp(w->root, "/") ? "/" : "", rel);
	if (n < 0 || n >= (int)sizeof(path))
		return -ENAMETOOLONG;
	/* Below the root: never through a symlink (it is an entry of its own). */
	uint32_t flags = *rel ? IN_DONT_FOLLOW | IN_ONLYDIR : IN_ONLYDIR;
	int wd = inotify_add_watch(ifd, path, WATCH_MASK | flags);
	if (wd < 0) {
		if (errno == ENOSPC) { /* the kernel's max_user_watches */
			w->unwatched++;
			return 0;
		}
		return -errno;
	}
	if (dir_by_wd(w, wd))
		return 0; /* the same directory by another name (a bind mount) */
	if (w->n_dirs == w->cap_dirs) {
		w->cap_dirs = w->cap_dirs ? w->cap_dirs * 2 : 16;
		w->dirs = xrealloc(w->dirs, w->cap_dirs * sizeof(*w->dirs));
	}
	w->dirs[w->n_dirs++] = (struct watch_dir){.wd = wd, .rel = xstrdup(rel)};
	watches_total++;
	return 1;
}

/* Watches rel (unless rel_watched) and, recursively, the directories below
 * it (iteratively: a deep tree costs no stack). With report, every entry
 * found is queued as created: a directory that appeared may have been
 * filled before its watch existed. */
static void tree_add(struct watch *w, int ifd, const char *rel, bool report, bool rel_watched)
{
	size_t n_todo = 0, cap_todo = 8;
	char **todo = xmalloc(cap_todo * sizeof(*todo));
	todo[n_todo++] = xstrdup(rel);
	while (n_todo > 0) {
		cleanup_free char *dir_rel = todo[--n_todo];
		if (!rel_watched && dir_add(w, ifd, dir_rel) <= 0)
			continue;
		rel_watched = false;
		if (!w->recursive)
			continue;
		char path[PATH_MAX];
		int n = snprintf(path, sizeof(path), "%s/%s", w->root, dir_rel);
		if (n < 0 || n >= (int)sizeof(path))
			continue;
		DIR *d = opendir(path);
		if (!d)
			continue; /* gone again: its IN_DELETE is on its way */
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char child[PATH_MAX];
			if (!rel_join(dir_rel, de->d_name, child))
				continue;
			if (report)
				queue_push(w, WATCH_CREATE, child);
			if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
				continue;
			/* Not into another filesystem (/proc, /sys, a mount below):
			 * like a recursive remove, a watch stays on the root's. */
			struct stat st;
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
			    st.st_dev != w->dev)
				continue;
			if (n_todo == cap_todo) {
				cap_todo *= 2;
				todo = xrealloc(todo, cap_todo * sizeof(*todo));
			}
			todo[n_todo++] = xstrdup(child);
		}
		closedir(d);
	}
	free(todo);
}

/* A directory moved away (IN_MOVED_FROM): its watches and those below it
 * would report under a name it no longer has. */
static void tree_forget(struct watch *w, int ifd, const char *rel)
{
	size_t len = strlen(rel);
	for (size_t i = w->n_dirs; i-- > 0;) {
		const char *r = w->dirs[i].rel;
		if (*r && !strncmp(r, rel, len) && (r[len] == '\0' || r[len] == '/')) {
			inotify_rm_watch(ifd, w->dirs[i].wd);
			dir_forget(w, i);
		}
	}
}

void agent_watch_free(struct stream *s)
{
	struct watch *w = s->watch;
	if (!w)
		return;
	watches_total -= w->n_dirs; /* the inotify fd, closed with the stream, takes them */
	for (size_t i = 0; i < w->n_dirs; i++)
		free(w->dirs[i].rel);
	free(w->dirs);
	for (size_t i = 0; i < w->q_len; i++)
		free(w->queue[(w->q_head + i) % AIRLOCK_WATCH_QUEUE_MAX].name);
	free(w->queue);
	free(w->root);
	free(w);
	s->watch = NULL;
}

static size_t watch_streams(const struct agent *a)
{
	size_t n = 0;
	for (size_t i = 0; i < a->n_streams; i++)
		n += a->streams[i]->kind == STREAM_WATCH;
	return n;
}

/* SECURITY: the request comes from the host: the path is absolute, shorter
 * than PATH_MAX and NUL-free (agent_json_get_path), "recursive" a boolean;
 * what a watch may cost is bounded by the AIRLOCK_WATCH_* limits. */
int agent_watch_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	const char *path = NULL;
	int r = agent_json_get_path(req, "path", &path, err);
	if (r < 0) {
		al_error_prefix(err, "WATCH");
		return r;
	}
	json_t *rec = json_object_get(req, "recursive"), *entries = json_object_get(req, "entries");
	if ((rec && !json_is_boolean(rec)) || (entries && !json_is_boolean(entries)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "WATCH: \"recursive\" and \"entries\" must be booleans");
	if (watch_streams(a) >= AIRLOCK_WATCH_STREAMS_MAX)
		return al_error_set(err, AL_ERR_CONFLICT, EMFILE,
		                    "WATCH \"%s\": the sandbox already has %d directory watches, the most it may "
		                    "have; stop one first",
		                    path, AIRLOCK_WATCH_STREAMS_MAX);
	struct stat st;
	if (stat(path, &st) < 0)
		return al_error_set(err, AL_ERR_NOT_FOUND, errno, "WATCH \"%s\": %m", path);
	if (!S_ISDIR(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTDIR, "WATCH \"%s\": not a directory", path);
	cleanup_close int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (ifd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "WATCH \"%s\": inotify_init1: %m", path);

	struct watch *w = xcalloc(1, sizeof(*w));
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	w->root = xstrndup(path, len);
	w->recursive = rec && json_is_true(rec);
	w->dev = st.st_dev;
	w->entries = entries && json_is_true(entries);
	w->queue = xcalloc(AIRLOCK_WATCH_QUEUE_MAX, sizeof(*w->queue));
	struct stream *s = agent_stream_new(a, id, STREAM_WATCH);
	s->watch = w;
	s->file_fd = TAKE_FD(ifd);
	r = dir_add(w, s->file_fd, "");
	if (r <= 0) {
		int e = r < 0 ? -r : ENOSPC;
		agent_stream_free(a, s);
		return al_error_set(err, AL_ERR_INTERNAL, e, "WATCH \"%s\": inotify_add_watch: %s", path, strerror(e));
	}
	if (w->recursive) /* the root's watch exists: only what is below it */
		tree_add(w, s->file_fd, "", false, true);
	cleanup_json json_t *start =
	    json_pack("{s:b, s:I, s:[]}", "started", 1, "watches", (json_int_t)w->n_dirs, "events");
	if (w->unwatched)
		json_object_set_new(start, "unwatched", json_integer((json_int_t)w->unwatched));
	w->unwatched = 0;
	cleanup_free char *text = json_dumps(start, JSON_COMPACT);
	if (!text)
		abort();
	agent_channel_send(a, AIRLOCK_FRAME_WATCH_EVENTS, id, text, strlen(text));
	agent_stream_output_sent(s, strlen(text));
	return 0;
}

static void watch_handle_event(struct watch *w, int ifd, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		w->lost++;
		return;
	}
	struct watch_dir *d = dir_by_wd(w, ev->wd);
	if (!d)
		return; /* a watch forgotten before its last events were read */
	if (ev->mask & IN_IGNORED) {
		bool root = d->rel[0] == '\0';
		dir_forget(w, (size_t)(d - w->dirs));
		if (root)
			w->ending = true;
		return;
	}
	if (ev->len == 0 || ev->name[0] == '\0')
		return; /* about the directory itself: its parent reports it by name */
	char name[PATH_MAX];
	if (!rel_join(d->rel, ev->name, name)) {
		w->lost++;
		return;
	}
	bool is_dir = ev->mask & IN_ISDIR;
	if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
		queue_push(w, WATCH_CREATE, name);
		if (is_dir && w->recursive)
			tree_add(w, ifd, name, true, false);
	}
	if (ev->mask & IN_MODIFY)
		queue_push(w, WATCH_WRITE, name);
	if (ev->mask & IN_ATTRIB)
		queue_push(w, WATCH_CHMOD, name);
	if (ev->mask & IN_DELETE)
		queue_push(w, WATCH_REMOVE, name);
	if (ev->mask & IN_MOVED_FROM) {
		queue_push(w, WATCH_RENAME, name);
		if (is_dir)
			tree_forget(w, ifd, name);
	}
}

/* Bytes of events read from the kernel at once: no more than the queue
 * has room for (an event with a name takes at least WATCH_EVENT_MIN_BYTES),
 * so that events wait in the kernel's queue rather than be lost in ours; at
 * least one event of the longest name (a smaller read fails with EINVAL). */
#define WATCH_EVENT_MIN_BYTES (sizeof(struct inotify_event) + 16)
#define WATCH_READ_MIN_BYTES (sizeof(struct inotify_event) + NAME_MAX + 1)
#define WATCH_READ_MAX_BYTES (64u * 1024u)

static size_t watch_read_size(const struct watch *w)
{
	size_t room = (AIRLOCK_WATCH_QUEUE_MAX - w->q_len) * WATCH_EVENT_MIN_BYTES;
	return MIN(room, (size_t)WATCH_READ_MAX_BYTES);
}

bool agent_watch_want_read(const struct stream *s)
{
	return !s->watch->ending && watch_read_size(s->watch) >= WATCH_READ_MIN_BYTES;
}

void agent_watch_read(struct stream *s)
{
	struct watch *w = s->watch;
	static uint8_t buf[WATCH_READ_MAX_BYTES] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(s->file_fd, buf, watch_read_size(w));
	if (n <= 0)
		return;
	for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
		watch_handle_event(w, s->file_fd, ev);
		off += (ssize_t)(sizeof(*ev) + ev->len);
	}
}

/* Room a frame needs beyond its events: the prefix and the counters; and
 * the most one event takes (a name, and with entries a symlink target, each
 * PATH_MAX bytes that may triple as JSON). */
#define WATCH_FRAME_OVERHEAD 96
#define WATCH_EVENT_TEXT_MAX (2 * PATH_MAX * 3 + 256)

bool agent_watch_ready(const struct agent *a, const struct stream *s)
{
	const struct watch *w = s->watch;
	if (!w->q_len && !w->lost && !w->unwatched && !w->ending)
		return false;
	return agent_stream_output_room(a, s) >= WATCH_FRAME_OVERHEAD + WATCH_EVENT_TEXT_MAX;
}

/* The stat of root/name now (the path may have changed since the event, as
 * envd's may too); NULL when it is gone. */
static json_t *event_entry(const struct watch *w, const struct watch_event *e)
{
	if (!w->entries || (e->op != WATCH_CREATE && e->op != WATCH_WRITE && e->op != WATCH_CHMOD))
		return NULL;
	char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s", w->root, e->name);
	if (n < 0 || n >= (int)sizeof(path))
		return NULL;
	const char *base = strrchr(e->name, '/');
	json_t *o = NULL;
	return agent_stat_json(AT_FDCWD, path, base ? base + 1 : e->name, &o) == 0 ? o : NULL;
}

bool agent_watch_pump(struct agent *a, struct stream *s)
{
	static char chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	struct watch *w = s->watch;
	size_t room = agent_stream_output_room(a, s);
	size_t used = 0, n_events = 0;
	used += (size_t)snprintf(chunk, sizeof(chunk), "{\"events\":[");
	while (w->q_len > 0 && n_events < AIRLOCK_WATCH_FRAME_EVENTS_MAX) {
		struct watch_event *e = &w->queue[w->q_head];
		cleanup_json json_t *o =
		    json_pack("{s:o, s:s}", "name", agent_json_string_lossy(e->name, strlen(e->name)), "op",
		              watch_op_names[e->op]);
		json_t *entry = event_entry(w, e);
		if (entry)
			json_object_set_new(o, "entry", entry);
		cleanup_free char *text = json_dumps(o, JSON_COMPACT);
		if (!text)
			abort();
		size_t len = strlen(text);
		if (used + 1 + len + WATCH_FRAME_OVERHEAD > room)
			break;
		if (n_events)
			chunk[used++] = ',';
		memcpy(chunk + used, text, len);
		used += len;
		free(e->name);
		w->q_head = (w->q_head + 1) % AIRLOCK_WATCH_QUEUE_MAX;
		w->q_len--;
		n_events++;
	}
	used += (size_t)snprintf(chunk + used, sizeof(chunk) - used, "]");
	if (w->lost)
		used +=
		    (size_t)snprintf(chunk + used, sizeof(chunk) - used, ",\"lost\":%llu", (unsigned long long)w->lost);
	if (w->unwatched)
		used += (size_t)snprintf(chunk + used, sizeof(chunk) - used, ",\"unwatched\":%llu",
		                         (unsigned long long)w->unwatched);
	used += (size_t)snprintf(chunk + used, sizeof(chunk) - used, "}");
	if (n_events || w->lost || w->unwatched) {
		agent_channel_send(a, AIRLOCK_FRAME_WATCH_EVENTS, s->id, chunk, used);
		agent_stream_output_sent(s, used);
		w->sent += n_events;
		w->lost = w->unwatched = 0;
	}
	if (!w->ending || w->q_len > 0)
		return false;
	agent_watch_end(a, s, "removed");
	return true;
}

void agent_watch_end(struct agent *a, struct stream *s, const char *reason)
{
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, s->id,
	                        json_pack("{s:s, s:I}", "reason", reason, "events", (json_int_t)s->watch->sent));
	agent_stream_free(a, s);
}
