/* SPDX-License-Identifier: Apache-2.0 */
/* Crash points (crash-point.h): test builds only. */
#ifdef AIRLOCK_CRASH_POINTS
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crash-point.h"
#include "log.h"

static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned hits;

void crash_point(const char *name)
{
	const char *want = getenv("AIRLOCK_TEST_CRASH_POINT");
	if (!want)
		return;
	size_t n = strlen(name);
	if (strncmp(want, name, n) || (want[n] && want[n] != '@'))
		return;
	unsigned nth = want[n] == '@' ? (unsigned)strtoul(want + n + 1, NULL, 10) : 1;
	pthread_mutex_lock(&hits_lock);
	unsigned now = ++hits;
	pthread_mutex_unlock(&hits_lock);
	if (now != nth)
		return;
	log_error("crash point %s (#%u): airlockd kills itself (AIRLOCK_TEST_CRASH_POINT, a test build)", name, now);
	kill(getpid(), SIGKILL);
	pause();
}
#else
/* An empty translation unit is not ISO C. */
typedef int crash_point_disabled;
#endif
