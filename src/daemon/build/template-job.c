/* SPDX-License-Identifier: Apache-2.0 */
/* Template jobs (template-job.h): a worker thread and a queue of JSON lines. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json-cleanup.h"
#include "log.h"
#include "util.h"
#include "template-job.h"

struct template_job {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned refs;
	char *buf; /* lines not yet read: buf[off, len) */
	size_t len, off, cap;
	uint64_t dropped; /* output bytes left out while the reader lagged */
	bool ended, cancelled;
	template_job_fn run;
	void *arg;
	void (*free_arg)(void *arg);
};

/* Every job, for the daemon's stop (template_jobs_shutdown). */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_cond = PTHREAD_COND_INITIALIZER;
static unsigned jobs_running;
static bool jobs_stopping;

static void append_locked(struct template_job *job, const char *s, size_t n)
{
	if (job->off && job->off == job->len)
		job->off = job->len = 0;
	if (job->len + n > job->cap) {
		job->cap = (job->len + n) * 2;
		job->buf = xrealloc(job->buf, job->cap);
	}
	memcpy(job->buf + job->len, s, n);
	job->len += n;
}

void template_job_emit(struct template_job *job, json_t *line)
{
	cleanup_free char *s = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(line);
	if (!s)
		return;
	pthread_mutex_lock(&job->lock);
	append_locked(job, s, strlen(s));
	append_locked(job, "\n", 1);
	pthread_cond_broadcast(&job->cond);
	pthread_mutex_unlock(&job->lock);
}

void template_job_output(struct template_job *job, const char *stream, const char *data, size_t len)
{
	pthread_mutex_lock(&job->lock);
	bool full = job->len - job->off + len > TEMPLATE_JOB_QUEUE_MAX;
	if (full)
		job->dropped += len;
	pthread_mutex_unlock(&job->lock);
	if (full)
		return;
	/* Output is bytes; the line carries it as text (invalid UTF-8 replaced). */
	cleanup_free char *text = xstrndup(data, len);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] >= 0x80 || (text[i] < 0x20 && text[i] != '\n' && text[i] != '\t'))
			text[i] = '?';
	template_job_emit(job, json_pack("{s:s, s:s, s:s}", "type", "output", "stream", stream, "data", text));
}

bool template_job_cancelled(struct template_job *job)
{
	pthread_mutex_lock(&job->lock);
	bool c = job->cancelled;
	pthread_mutex_unlock(&job->lock);
	pthread_mutex_lock(&jobs_lock);
	c = c || jobs_stopping;
	pthread_mutex_unlock(&jobs_lock);
	return c;
}

static void jobs_count(int delta)
{
	pthread_mutex_lock(&jobs_lock);
	jobs_running = (unsigned)((int)jobs_running + delta);
	pthread_cond_broadcast(&jobs_cond);
	pthread_mutex_unlock(&jobs_lock);
}

void template_jobs_shutdown(unsigned timeout_s)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_s;
	pthread_mutex_lock(&jobs_lock);
	jobs_stopping = true;
	if (jobs_running)
		log_info("template jobs: cancelling %u build(s) and import(s)", jobs_running);
	while (jobs_running && pthread_cond_timedwait(&jobs_cond, &jobs_lock, &until) != ETIMEDOUT)
		;
	if (jobs_running)
		log_error("template jobs: %u still running after %u s; stopping anyway", jobs_running, timeout_s);
	pthread_mutex_unlock(&jobs_lock);
}

static void *job_main(void *p)
{
	struct template_job *job = p;
	struct al_error err = {0};
	json_t *done = NULL;
	int r = job->run(job, job->arg, &done, &err);
	if (r < 0)
		template_job_emit(job, json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "code",
		                                 al_error_code_name(err.code), "message", err.message));
	else
		template_job_emit(job,
		                  json_pack("{s:s, s:o}", "type", "done", "template", done ? done : json_object()));
	if (job->free_arg)
		job->free_arg(job->arg);
	pthread_mutex_lock(&job->lock);
	job->ended = true;
	pthread_cond_broadcast(&job->cond);
	pthread_mutex_unlock(&job->lock);
	template_job_unref(job);
	jobs_count(-1);
	return NULL;
}

int template_job_start(template_job_fn run, void *arg, void (*free_arg)(void *arg), struct template_job **ret,
                       struct al_error *err)
{
	struct template_job *job = xcalloc(1, sizeof(*job));
	pthread_mutex_init(&job->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&job->cond, &ca);
	pthread_condattr_destroy(&ca);
	job->refs = 2;
	job->run = run;
	job->arg = arg;
	job->free_arg = free_arg;
	pthread_t t;
	jobs_count(+1);
	int e = pthread_create(&t, NULL, job_main, job);
	if (e) {
		jobs_count(-1);
		job->refs = 1;
		if (free_arg)
			free_arg(arg);
		job->free_arg = NULL;
		template_job_unref(job);
		return al_error_set(err, AL_ERR_INTERNAL, e, "start the template job's thread: %s", strerror(e));
	}
	pthread_detach(t);
	*ret = job;
	return 0;
}

ssize_t template_job_read(struct template_job *job, uint8_t *buf, size_t max, unsigned timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&job->lock);
	int w = 0;
	while (job->off == job->len && !job->ended && w != ETIMEDOUT)
		w = pthread_cond_timedwait(&job->cond, &job->lock, &until);
	ssize_t n = -ETIMEDOUT;
	if (job->off < job->len) {
		size_t k = MIN(max, job->len - job->off);
		memcpy(buf, job->buf + job->off, k);
		job->off += k;
		n = (ssize_t)k;
	} else if (job->ended) {
		n = 0;
	}
	pthread_mutex_unlock(&job->lock);
	return n;
}

void template_job_cancel(struct template_job *job)
{
	pthread_mutex_lock(&job->lock);
	if (!job->ended)
		job->cancelled = true;
	pthread_mutex_unlock(&job->lock);
}

void template_job_unref(struct template_job *job)
{
	if (!job)
		return;
	pthread_mutex_lock(&job->lock);
	bool last = --job->refs == 0;
	pthread_mutex_unlock(&job->lock);
	if (!last)
		return;
	if (job->dropped)
		log_info("template job: %" PRIu64 " bytes of output were not read in time and left out", job->dropped);
	pthread_cond_destroy(&job->cond);
	pthread_mutex_destroy(&job->lock);
	free(job->buf);
	free(job);
}
