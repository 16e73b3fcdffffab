/* SPDX-License-Identifier: Apache-2.0 */
#include "cpu-wait.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Adds the threads of one process to out. */
static int sample_process(pid_t pid, struct cpu_wait *out)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	struct dirent *de;
	while (out->n < CPU_WAIT_THREADS_MAX && (de = readdir(d))) {
		long tid;
		if (parse_int_range(de->d_name, 1, INT32_MAX, &tid) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%ld/schedstat", (int)pid, tid);
		/* "<ns on a CPU> <ns waiting for one> <timeslices>" */
		cleanup_free char *stat = NULL;
		uint64_t run_ns, wait_ns;
		if (read_file_limited(path, 4096, &stat, NULL) < 0 ||
		    sscanf(stat, "%" SCNu64 " %" SCNu64, &run_ns, &wait_ns) != 2)
			continue; /* the thread ended meanwhile */
		out->t[out->n].tid = (pid_t)tid;
		out->t[out->n].run_delay_ns = wait_ns;
		out->n++;
	}
	closedir(d);
	return 0;
}

int cpu_wait_sample(pid_t pid, pid_t child, struct cpu_wait *out)
{
	out->n = 0;
	int r = sample_process(pid, out);
	if (child > 0) {
		int rc = sample_process(child, out);
		if (rc == 0)
			r = 0;
	}
	return r;
}

uint64_t cpu_wait_added_ms(const struct cpu_wait *before, const struct cpu_wait *after)
{
	uint64_t added = 0;
	for (size_t i = 0; i < after->n; i++) {
		uint64_t base = 0;
		for (size_t j = 0; j < before->n; j++)
			if (before->t[j].tid == after->t[i].tid) {
				base = before->t[j].run_delay_ns;
				break;
			}
		if (after->t[i].run_delay_ns > base)
			added += after->t[i].run_delay_ns - base;
	}
	return added / 1000000u;
}

/* "pid (comm) state ppid ...": comm may hold spaces and ')'. */
static bool child_of(long pid, const char *stat, void *ctx)
{
	(void)pid;
	const char *rp = strrchr(stat, ')');
	char state;
	int ppid;
	return rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == *(const int *)ctx;
}

pid_t proc_first_child(pid_t parent)
{
	int p = (int)parent;
	return (pid_t)proc_each_file("stat", 4096, child_of, &p);
}
