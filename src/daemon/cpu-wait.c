/* SPDX-License-Identifier: Apache-2.0 */
#include "cpu-wait.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* Reads a small /proc file whole into buf (NUL-terminated). */
static ssize_t read_small(int dirfd, const char *path, char *buf, size_t size)
{
	cleanup_close int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return n;
}

/* A directory of /proc, or NULL with errno set. */
static DIR *proc_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return d;
}

/* The number an entry of /proc or /proc/PID/task is named by, or 0. */
static long entry_id(const struct dirent *de)
{
	char *end;
	if (de->d_name[0] < '0' || de->d_name[0] > '9')
		return 0;
	long id = strtol(de->d_name, &end, 10);
	return *end || id <= 0 ? 0 : id;
}

/* Adds the threads of one process to out. */
static int sample_process(pid_t pid, struct cpu_wait *out)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = proc_dir(path);
	if (!d)
		return -errno;
	struct dirent *de;
	while (out->n < CPU_WAIT_THREADS_MAX && (de = readdir(d))) {
		long tid = entry_id(de);
		if (!tid)
			continue;
		char stat[128], name[32];
		snprintf(name, sizeof(name), "%ld/schedstat", tid);
		/* "<ns on a CPU> <ns waiting for one> <timeslices>" */
		uint64_t run_ns, wait_ns;
		if (read_small(dirfd(d), name, stat, sizeof(stat)) <= 0 ||
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

pid_t proc_first_child(pid_t parent)
{
	DIR *d = proc_dir("/proc");
	if (!d)
		return 0;
	pid_t found = 0;
	struct dirent *de;
	while (!found && (de = readdir(d))) {
		long pid = entry_id(de);
		if (!pid)
			continue;
		char stat[512], name[32];
		snprintf(name, sizeof(name), "%ld/stat", pid);
		if (read_small(dirfd(d), name, stat, sizeof(stat)) <= 0)
			continue;
		/* "pid (comm) state ppid ...": comm may hold spaces and ')'. */
		const char *rp = strrchr(stat, ')');
		char state;
		int ppid;
		if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)parent)
			found = (pid_t)pid;
	}
	closedir(d);
	return found;
}
