/* SPDX-License-Identifier: Apache-2.0 */
/* How long a VMM's threads waited for a CPU: the kernel's schedstat
 * run_delay (/proc/PID/task/TID/schedstat, second field), the time a thread
 * was runnable but not running, whether the host was overloaded or its
 * cgroup's CPU quota throttled it. The watchdog does not count that time as
 * silence: a starved guest is slow, not hung. */
#ifndef AIRLOCK_CPU_WAIT_H
#define AIRLOCK_CPU_WAIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Threads followed per sample: QEMU and Firecracker have a handful; more
 * are not looked at (the vCPU threads start first). */
#define CPU_WAIT_THREADS_MAX 32

struct cpu_wait {
	size_t n;
	struct {
		pid_t tid;
		uint64_t run_delay_ns;
	} t[CPU_WAIT_THREADS_MAX];
};

/* The threads of pid and, if child > 0, of child (the VMM under its
 * jailer). -errno if neither can be read. */
int cpu_wait_sample(pid_t pid, pid_t child, struct cpu_wait *out);

/* The waits the threads added between two samples, summed, in ms (a
 * thread new in `after` counts from 0). Two threads waiting at once count
 * twice, and the bottleneck moves between threads (the main loop, then the
 * vCPU it woke): the caller caps the sum at the time elapsed, so a starved
 * VMM is not undercounted. */
uint64_t cpu_wait_added_ms(const struct cpu_wait *before, const struct cpu_wait *after);

/* The first process whose parent is `parent` (a jailer's VMM), or 0. Reads
 * every /proc/N/stat: called once per VMM, not per look. */
pid_t proc_first_child(pid_t parent);

#endif
