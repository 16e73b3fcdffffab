/* SPDX-License-Identifier: Apache-2.0 */
/* Crash points (crash-point.h): test builds only. */
#ifdef AIRLOCK_CRASH_POINTS
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crash-point.h"
#include "log.h"

static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned hits;

/* $AIRLOCK_TEST_CRASH_POINT, or, when that is an absolute path, what the
 * file says now (a test arms a point without restarting the daemon). */
static void crash_point_wanted(char *buf, size_t size)
{
	const char *env = getenv("AIRLOCK_TEST_CRASH_POINT");
	buf[0] = '\0';
	if (!env || env[0] != '/') {
		snprintf(buf, size, "%s", env ? env : "");
		return;
	}
	FILE *f = fopen(env, "re");
	if (!f)
		return;
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
}

void crash_point(const char *name)
{
	char want[128];
	crash_point_wanted(want, sizeof(want));
	if (!want[0])
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
