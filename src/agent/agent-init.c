/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Guest boot, run as PID 1 from the initramfs:
 *   mount /proc /sys /dev (+ /dev/pts /dev/shm), load /etc/airlock/modules,
 *   wait for airlock.root=DEV (kernel command line), mount it ext4 on /newroot,
 *   grow its filesystem to the disk (create's disk_mib), move /proc /sys /dev into it, remove the initramfs files,
 * switch root (chdir, mount --move . /, chroot .), tmpfs on /run, hostname, loopback up, eth0 with the network plan of
 * airlock/proto.h and /etc/resolv.conf. Without airlock.root= the agent stays in the initramfs. Any failure here is
 * fatal: a message on the console, then exit, which panics the kernel; with
 * panic=-1 and QEMU's -no-reboot that ends the VM, which is how the host
 * learns that the guest is broken.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "airlock/proto.h"
#include "util.h"

#define GUEST_NIC "eth0"

#define MODULES_LIST "/etc/airlock/modules"

/* EXT4_IOC_RESIZE_FS is in fs/ext4/ext4.h only (no uapi header has it);
 * BLKGETSIZE64 is in <linux/fs.h>, which clashes with <sys/mount.h>. */
#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif
#ifndef BLKGETSIZE64
#define BLKGETSIZE64 _IOR(0x12, 114, size_t)
#endif
/* The ext4 superblock (1024 bytes at offset 1024) and the fields read. */
#define EXT4_SB_OFFSET 1024
#define EXT4_SB_SIZE 1024
#define EXT4_SB_MAGIC 0xEF53
#define EXT4_FEATURE_INCOMPAT_64BIT 0x80
#define CMDLINE_MAX 4096

/* One line on stderr (the console), in one write. */
static void __attribute__((format(printf, 2, 0))) log_line(const char *prefix, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	char line[1100];
	int n = snprintf(line, sizeof(line), "airlock-agent: %s%s\n", prefix, msg);
	if (n > 0)
		(void)!write(STDERR_FILENO, line, MIN((size_t)n, sizeof(line) - 1));
}

void agent_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_line("", fmt, ap);
	va_end(ap);
}

void agent_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_line("FATAL: ", fmt, ap);
	va_end(ap);
	if (getpid() == 1)
		agent_log("FATAL: the guest cannot start; exiting (the kernel panics and the VM stops)");
	sync();
	_exit(1);
}

/* The kernel hands init /dev/console as fds 0-2 when the initramfs has it;
 * make sure they exist either way so messages reach the console. */
static void init_console(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int c = open("/dev/console", O_RDWR | O_NOCTTY);
		if (c < 0)
			c = open("/dev/null", O_RDWR);
		if (c >= 0 && c != fd) {
			dup2(c, fd);
			close(c);
		}
	}
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY)
		agent_fatal("mount %s on %s (%s): %s", src, dst, type, strerror(errno));
}

static void init_mount_basics(void)
{
	mount_or_die("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_or_die("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_or_die("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mount_or_die("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
	mount_or_die("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	/* /dev/ptmx must lead to this devpts instance. */
	if (access("/dev/ptmx", F_OK) < 0)
		(void)!symlink("pts/ptmx", "/dev/ptmx");
	(void)!symlink("/proc/self/fd", "/dev/fd");
	(void)!symlink("/proc/self/fd/0", "/dev/stdin");
	(void)!symlink("/proc/self/fd/1", "/dev/stdout");
	(void)!symlink("/proc/self/fd/2", "/dev/stderr");
}

/* Loads every module listed in MODULES_LIST (paths, in load order) with
 * finit_module(2); a module already present (EEXIST) is fine. A module that
 * fails to load is reported but not fatal: what it would have provided (the
 * root disk, the port) is waited for, and that failure is the fatal one. */
static void init_load_modules(void)
{
	cleanup_free char *list = NULL;
	int r = read_file_limited(MODULES_LIST, 64 * 1024, &list, NULL);
	if (r == -ENOENT)
		return;
	if (r < 0)
		agent_fatal("read %s: %s", MODULES_LIST, strerror(-r));
	char *save = NULL;
	for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '\0' || line[0] == '#')
			continue;
		cleanup_close int fd = open(line, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			agent_log("module %s: %s", line, strerror(errno));
			continue;
		}
		if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
			agent_log("load module %s: %s", line, strerror(errno));
	}
}

/* Value of KEY=... on the kernel command line, or -ENOENT. */
static int cmdline_get(const char *key, char *ret, size_t size)
{
	cleanup_free char *cmdline = NULL;
	int r = read_file_limited("/proc/cmdline", CMDLINE_MAX, &cmdline, NULL);
	if (r < 0)
		return r;
	size_t klen = strlen(key);
	char *save = NULL;
	for (char *w = strtok_r(cmdline, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
		if (strncmp(w, key, klen) == 0 && w[klen] == '=') {
			if (strlcpy_al(ret, w + klen + 1, size) >= size)
				return -ENAMETOOLONG;
			return 0;
		}
	}
	return -ENOENT;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void wait_for_block_device(const char *dev)
{
	uint64_t deadline = now_ms_monotonic() + AGENT_ROOT_WAIT_MS;
	struct stat st;
	for (;;) {
		if (stat(dev, &st) == 0) {
			if (!S_ISBLK(st.st_mode))
				agent_fatal("root device %s is not a block device", dev);
			return;
		}
		if (now_ms_monotonic() >= deadline)
			agent_fatal("root device %s did not appear within %d ms (is the disk attached as virtio-blk?)",
			            dev, AGENT_ROOT_WAIT_MS);
		sleep_ms(5);
	}
}

/* The initramfs is RAM: free what is no longer needed (the modules). The
 * agent binary itself stays mapped until the VM stops either way. */
static void init_free_initramfs(void)
{
	rm_rf("/lib");
	rm_rf("/etc");
}

static uint32_t le_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Block size and block count of the ext4 filesystem on the device fd, from
 * its superblock (statfs's f_blocks leaves out the metadata overhead). */
static int ext4_geometry(int fd, uint64_t *ret_block_size, uint64_t *ret_blocks)
{
	uint8_t sb[EXT4_SB_SIZE];
	if (pread(fd, sb, sizeof(sb), EXT4_SB_OFFSET) != (ssize_t)sizeof(sb))
		return -EIO;
	if ((le_u32(sb + 0x38) & 0xffff) != EXT4_SB_MAGIC || le_u32(sb + 0x18) > 6)
		return -EINVAL;
	uint64_t blocks = le_u32(sb + 0x04);
	if (le_u32(sb + 0x60) & EXT4_FEATURE_INCOMPAT_64BIT)
		blocks |= (uint64_t)le_u32(sb + 0x150) << 32;
	*ret_block_size = 1024u << le_u32(sb + 0x18);
	*ret_blocks = blocks;
	return 0;
}

/* A disk created bigger than its template (create's disk_mib) holds the
 * template's filesystem and free space past it: grow the filesystem online
 * to the whole device. Never fatal: the guest runs on the template's size. */
static void init_grow_root(const char *dev, const char *mnt)
{
	cleanup_close int dfd = open(dev, O_RDONLY | O_CLOEXEC);
	uint64_t dev_bytes = 0, block_size = 0, blocks = 0;
	int r = dfd < 0 || ioctl(dfd, BLKGETSIZE64, &dev_bytes) < 0 ? -errno : ext4_geometry(dfd, &block_size, &blocks);
	if (r < 0) {
		agent_log("grow root: size of %s or its filesystem: %s (keeping the filesystem's size)", dev,
		          strerror(-r));
		return;
	}
	uint64_t want = dev_bytes / block_size;
	if (want <= blocks)
		return;
	cleanup_close int mfd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mfd < 0 || ioctl(mfd, EXT4_IOC_RESIZE_FS, &want) < 0) {
		agent_log("grow root: resize ext4 on %s from %" PRIu64 " to %" PRIu64 " blocks: %s (keeping its size)",
		          dev, blocks, want, strerror(errno));
		return;
	}
	agent_log("grow root: %s grown from %" PRIu64 " to %" PRIu64 " MiB", dev, blocks * block_size >> 20,
	          want * block_size >> 20);
}

static void mount_move_into(const char *from, const char *to)
{
	mkdir(to, 0755);
	if (mount(from, to, NULL, MS_MOVE, NULL) < 0)
		agent_fatal("move mount %s to %s: %s", from, to, strerror(errno));
}

static void init_switch_root(const char *dev)
{
	wait_for_block_device(dev);
	mkdir("/newroot", 0755);
	if (mount(dev, "/newroot", "ext4", MS_NOATIME, NULL) < 0)
		agent_fatal("mount root %s (ext4) on /newroot: %s (is the template image a valid ext4 filesystem?)",
		            dev, strerror(errno));
	init_grow_root(dev, "/newroot");
	mount_move_into("/dev", "/newroot/dev");
	mount_move_into("/proc", "/newroot/proc");
	mount_move_into("/sys", "/newroot/sys");
	init_free_initramfs();
	if (chdir("/newroot") < 0)
		agent_fatal("chdir /newroot: %s", strerror(errno));
	if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
		agent_fatal("move /newroot to /: %s", strerror(errno));
	if (chroot(".") < 0)
		agent_fatal("chroot: %s", strerror(errno));
	if (chdir("/") < 0)
		agent_fatal("chdir /: %s", strerror(errno));
}

static void init_loopback_up(void)
{
	cleanup_close int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	struct ifreq ifr = {0};
	strlcpy_al(ifr.ifr_name, "lo", sizeof(ifr.ifr_name));
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		agent_log("bring up lo: %s", strerror(errno));
}

static int set_addr(int fd, unsigned long req, const char *ifname, const char *addr)
{
	struct ifreq ifr = {0};
	strlcpy_al(ifr.ifr_name, ifname, sizeof(ifr.ifr_name));
	struct sockaddr_in sin = {.sin_family = AF_INET};
	inet_pton(AF_INET, addr, &sin.sin_addr);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	return ioctl(fd, req, &ifr);
}

/*
 * eth0 (when the VM has a NIC) gets the network plan every sandbox shares
 * (airlock/proto.h): its address, the gateway as default route and as the
 * resolver. The host decides what any of it reaches; nothing here is a
 * security boundary.
 */
static void init_network(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/sys/class/net/%s", GUEST_NIC);
	for (int i = 0; i < 50 && access(path, F_OK) < 0; i++)
		sleep_ms(10);
	if (access(path, F_OK) < 0) {
		agent_log("no %s: this sandbox has no network", GUEST_NIC);
		return;
	}
	cleanup_close int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (set_addr(fd, SIOCSIFADDR, GUEST_NIC, AIRLOCK_NET_GUEST_ADDR) < 0 ||
	    set_addr(fd, SIOCSIFNETMASK, GUEST_NIC, AIRLOCK_NET_NETMASK) < 0) {
		agent_log("%s: address: %s", GUEST_NIC, strerror(errno));
		return;
	}
	struct ifreq ifr = {0};
	strlcpy_al(ifr.ifr_name, GUEST_NIC, sizeof(ifr.ifr_name));
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
			agent_log("%s: up: %s", GUEST_NIC, strerror(errno));
	}
	struct rtentry rt = {0};
	struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gw = (struct sockaddr_in *)&rt.rt_gateway,
	                   *mask = (struct sockaddr_in *)&rt.rt_genmask;
	dst->sin_family = gw->sin_family = mask->sin_family = AF_INET;
	inet_pton(AF_INET, AIRLOCK_NET_GATEWAY, &gw->sin_addr);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)GUEST_NIC;
	if (ioctl(fd, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		agent_log("default route: %s", strerror(errno));
	/* A symlink (to a resolver's runtime file) is replaced by a file; an
	 * image without /etc (one static binary) gets one. */
	if (mkdir("/etc", 0755) < 0 && errno != EEXIST)
		agent_log("/etc: %s", strerror(errno));
	unlink("/etc/resolv.conf");
	static const char resolv[] = "nameserver " AIRLOCK_NET_DNS "\n";
	cleanup_close int rf = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (rf < 0 || write_full(rf, resolv, sizeof(resolv) - 1) < 0)
		agent_log("/etc/resolv.conf: %s", strerror(errno));
}

void agent_init_boot(void)
{
	init_console();
	umask(022);
	setenv("PATH", AGENT_DEFAULT_PATH, 1);
	setenv("HOME", "/root", 1);
	init_mount_basics();
	init_load_modules();

	char root[256];
	int r = cmdline_get("airlock.root", root, sizeof(root));
	if (r == 0)
		init_switch_root(root);
	else if (r != -ENOENT)
		agent_fatal("airlock.root on the kernel command line: %s", strerror(-r));
	else
		agent_log("no airlock.root= on the kernel command line: staying in the initramfs");

	mount_or_die("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	if (sethostname("airlock", strlen("airlock")) < 0)
		agent_log("sethostname: %s", strerror(errno));
	init_loopback_up();
	init_network();
}

void agent_init_poweroff(void)
{
	/* Everything but PID 1 itself. */
	kill(-1, SIGKILL);
	sync();
	reboot(RB_POWER_OFF);
	agent_fatal("power off: %s", strerror(errno));
}
