/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A template build or import running on its own thread while its request
 * streams the progress (docs/api.md, "Templates"): the worker emits JSON
 * lines, the request's reader takes them in order. A client that goes away
 * cancels the work (the worker checks between steps and while a RUN runs).
 */
#ifndef AIRLOCK_TEMPLATE_JOB_H
#define AIRLOCK_TEMPLATE_JOB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define TEMPLATE_JOB_QUEUE_MAX (4u << 20) /* bytes of lines not yet read: later output lines are dropped */

struct template_job;

/* run(job, arg) is the work: it emits lines and returns 0 or an error (then
 * the job's last line is {"type":"error"}); free_arg(arg) after it. */
typedef int (*template_job_fn)(struct template_job *job, void *arg, json_t **ret_done, struct al_error *err);

/* Starts the work on a thread of its own (the job holds one reference for
 * it, the caller gets another). */
int template_job_start(template_job_fn run, void *arg, void (*free_arg)(void *arg), struct template_job **ret,
                       struct al_error *err);
/* Appends a line (stolen). */
void template_job_emit(struct template_job *job, json_t *line);
/* {"type":"step",...} and {"type":"output",...} and {"type":"progress",...} */
void template_job_output(struct template_job *job, const char *stream, const char *data, size_t len);
bool template_job_cancelled(struct template_job *job);

/* The reader: copies whole lines into buf; blocks until there is one, 0
 * once the work ended and every line was read. Gives up waiting after
 * timeout_ms with -ETIMEDOUT, so the caller can look at its client. */
ssize_t template_job_read(struct template_job *job, uint8_t *buf, size_t max, unsigned timeout_ms);
/* The reader is gone: the work is cancelled if it still runs. */
void template_job_cancel(struct template_job *job);
void template_job_unref(struct template_job *job);
/* The daemon stops: every job is cancelled (its RUN killed, its build's
 * sandbox deleted), and waited for at most timeout_s. */
void template_jobs_shutdown(unsigned timeout_s);

#endif
