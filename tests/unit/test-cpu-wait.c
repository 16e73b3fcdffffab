/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/core/cpu-wait.c: the watchdog's measure of how long
 * a VMM waited for a CPU. Real processes, real schedstat. */
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu-wait.h"

static void spin_for_ms(unsigned ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000u + (uint64_t)(t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

/* A child that spins on CPU 0 until killed. */
static pid_t spinner(void)
{
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(0, &set);
		sched_setaffinity(0, sizeof(set), &set);
		for (;;)
			spin_for_ms(1000);
	}
	return p;
}

static void test_first_child_is_found(void **state)
{
	(void)state;
	pid_t c = spinner();
	pid_t found = 0;
	for (int i = 0; i < 100 && !found; i++)
		found = proc_first_child(getpid());
	assert_int_equal(found, c);
	/* A process without children has none. */
	assert_int_equal(proc_first_child(c), 0);
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
}

/* Two spinners on one CPU: each waits about half the time, and the sum of
 * their waits over an interval is about the interval. */
static void test_waits_of_two_spinners_on_one_cpu(void **state)
{
	(void)state;
	pid_t a = spinner(), b = spinner();
	usleep(100 * 1000);
	struct cpu_wait before, after;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(cpu_wait_sample(a, b, &before), 0);
	assert_int_equal(before.n, 2);
	usleep(1000 * 1000);
	assert_int_equal(cpu_wait_sample(a, b, &after), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t elapsed = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000u + (uint64_t)(t1.tv_nsec - t0.tv_nsec) / 1000000;
	uint64_t waited = cpu_wait_added_ms(&before, &after);
	/* About the interval (other load on CPU 0 adds more); two threads
	 * cannot wait more than twice it. */
	assert_true(waited >= elapsed / 2);
	assert_true(waited <= 2 * elapsed + 50);
	/* Nothing was added between a sample and itself. */
	assert_int_equal(cpu_wait_added_ms(&after, &after), 0);
	kill(a, SIGKILL);
	kill(b, SIGKILL);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
}

/* A sleeping process waits for no CPU; a gone one cannot be read. */
static void test_sleeper_waits_for_nothing(void **state)
{
	(void)state;
	pid_t s = fork();
	assert_true(s >= 0);
	if (s == 0) {
		pause();
		_exit(0);
	}
	usleep(100 * 1000);
	struct cpu_wait before, after;
	assert_int_equal(cpu_wait_sample(s, 0, &before), 0);
	usleep(500 * 1000);
	assert_int_equal(cpu_wait_sample(s, 0, &after), 0);
	assert_true(cpu_wait_added_ms(&before, &after) < 50);
	kill(s, SIGKILL);
	waitpid(s, NULL, 0);
	assert_true(cpu_wait_sample(s, 0, &after) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_first_child_is_found),
	    cmocka_unit_test(test_waits_of_two_spinners_on_one_cpu),
	    cmocka_unit_test(test_sleeper_waits_for_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
