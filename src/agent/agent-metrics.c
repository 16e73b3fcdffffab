/* SPDX-License-Identifier: Apache-2.0 */
/*
 * METRICS: one OK frame with what the guest kernel says about itself.
 *   cpu_usage_usec     /proc/stat "cpu" line (all CPUs): user + nice + system
 *                      + irq + softirq + steal, clock ticks -> microseconds
 *   cpus               online CPUs
 *   mem_total_kib, mem_available_kib   /proc/meminfo MemTotal, MemAvailable
 *   disk_total_bytes, disk_used_bytes  statvfs("/"): f_blocks and
 *                      f_blocks - f_bfree, in f_frsize units
 *   uptime_ms          CLOCK_BOOTTIME (what /proc/uptime shows)
 *   processes          numeric entries of /proc
 * Answered at once; the stream ends with the OK (or an ERROR naming what
 * could not be read).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

#define PROC_STAT_MAX (1024 * 1024)
#define PROC_MEMINFO_MAX (64 * 1024)

static int cpu_usage_usec(uint64_t *ret)
{
	cleanup_free char *text = NULL;
	int r = read_file_limited("/proc/stat", PROC_STAT_MAX, &text, NULL);
	if (r < 0)
		return r;
	if (strncmp(text, "cpu ", 4) != 0)
		return -EBADMSG;
	/* user nice system idle iowait irq softirq steal [guest guest_nice] */
	unsigned long long v[8];
	if (sscanf(text + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
	           &v[7]) != 8)
		return -EBADMSG;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	uint64_t ticks = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	*ret = ticks / (uint64_t)hz * 1000000u + ticks % (uint64_t)hz * 1000000u / (uint64_t)hz;
	return 0;
}

static int meminfo(uint64_t *ret_total_kib, uint64_t *ret_avail_kib)
{
	cleanup_free char *text = NULL;
	int r = read_file_limited("/proc/meminfo", PROC_MEMINFO_MAX, &text, NULL);
	if (r < 0)
		return r;
	unsigned long long total = 0, avail = 0;
	bool has_total = false, has_avail = false;
	for (char *line = text; line && *line;) {
		if (sscanf(line, "MemTotal: %llu kB", &total) == 1)
			has_total = true;
		else if (sscanf(line, "MemAvailable: %llu kB", &avail) == 1)
			has_avail = true;
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	if (!has_total || !has_avail)
		return -EBADMSG;
	*ret_total_kib = total;
	*ret_avail_kib = avail;
	return 0;
}

static int count_processes(uint64_t *ret)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	uint64_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (isdigit((unsigned char)de->d_name[0]))
			n++;
	closedir(d);
	*ret = n;
	return 0;
}

/* The answer: what the guest kernel says about itself (see the top). */
static int metrics_collect(json_t **ret, struct al_error *err)
{
	uint64_t cpu = 0, mem_total = 0, mem_avail = 0, procs = 0;
	int r = cpu_usage_usec(&cpu);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "/proc/stat: %s", strerror(-r));
	if ((r = meminfo(&mem_total, &mem_avail)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "/proc/meminfo: %s", strerror(-r));
	if ((r = count_processes(&procs)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "/proc: %s", strerror(-r));
	struct statvfs vfs;
	if (statvfs("/", &vfs) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "statvfs /: %m");
	struct timespec ts;
	if (clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "clock_gettime(CLOCK_BOOTTIME): %m");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	uint64_t used = (uint64_t)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
	uint64_t uptime_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	*ret = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "cpu_usage_usec", (json_int_t)cpu, "cpus",
	                 (json_int_t)(cpus > 0 ? cpus : 1), "mem_total_kib", (json_int_t)mem_total, "mem_available_kib",
	                 (json_int_t)mem_avail, "disk_total_bytes", (json_int_t)total, "disk_used_bytes",
	                 (json_int_t)used, "uptime_ms", (json_int_t)uptime_ms, "processes", (json_int_t)procs);
	return 0;
}

/* SECURITY: the request is ignored beyond being empty or a JSON object (the
 * dispatcher checks that); the answer is built from the guest kernel's own
 * files, bounded in size. */
int agent_metrics_send(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	(void)req;
	json_t *o = NULL;
	int r = metrics_collect(&o, err);
	if (r < 0) {
		al_error_prefix(err, "METRICS");
		return r;
	}
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, o);
	return 0;
}
