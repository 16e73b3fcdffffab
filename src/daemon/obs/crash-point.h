/* SPDX-License-Identifier: Apache-2.0 */
/* Crash points: named places inside lifecycle operations where a test
 * build of airlockd (make crash-build: -DAIRLOCK_CRASH_POINTS) kills itself
 * with SIGKILL when $AIRLOCK_TEST_CRASH_POINT names that place (or names a
 * file that does, read at every crash point), so that the
 * crash-injection tests (tests/integration/test_crash_points.py) can check
 * what a restart makes of every half-done operation. In every other build
 * a crash point is nothing at all: no code, no environment read. */
#ifndef AIRLOCK_CRASH_POINT_H
#define AIRLOCK_CRASH_POINT_H

#ifdef AIRLOCK_CRASH_POINTS
/* Dies here if $AIRLOCK_TEST_CRASH_POINT is `name`, or `name@N` and this is
 * the Nth time this process passes `name` (from 1). */
void crash_point(const char *name);
#else
static inline void crash_point(const char *name)
{
	(void)name;
}
#endif

#endif
