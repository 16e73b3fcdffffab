/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>

#include "util.h"

void log_line(const char *level, const char *fmt, ...)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	char ts[32], msg[4096];
	int saved = errno;
	format_time_rfc3339(now_ms_realtime(), ts);
	va_list ap;
	va_start(ap, fmt);
	errno = saved;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&lock);
	fprintf(stderr, "%s airlockd %s: %s\n", ts, level, msg);
	fflush(stderr);
	pthread_mutex_unlock(&lock);
	errno = saved;
}
