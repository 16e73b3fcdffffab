/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host <-> guest channel: one byte stream (virtio-serial port or vsock)
 * carrying length-prefixed frames.
 *
 * Frame = 12-byte header + payload, all integers big-endian:
 *
 *   offset 0  u8   version   AIRLOCK_PROTO_VERSION
 *   offset 1  u8   type      enum airlock_frame_type
 *   offset 2  u16  flags     must be 0 (reserved)
 *   offset 4  u32  stream    0 = channel control, else a stream id chosen by the host
 *   offset 8  u32  length    payload bytes, <= AIRLOCK_FRAME_MAX_PAYLOAD
 *
 * Control payloads (HELLO, EXEC, EXIT, ERROR, FILE_*, OK, WATCH, WATCH_EVENTS)
 * are a JSON object;
 * data payloads (STDIN, STDOUT, STDERR, FILE_DATA) are raw bytes; CREDIT is a
 * 4-byte big-endian byte count.
 *
 * SECURITY: the host parses every guest frame as hostile input: the header is
 * validated (version, type, flags, length) before a byte of payload is
 * buffered, and no length is trusted that has not been checked against
 * AIRLOCK_FRAME_MAX_PAYLOAD.
 */
#ifndef AIRLOCK_PROTO_H
#define AIRLOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define AIRLOCK_PROTO_VERSION 1
#define AIRLOCK_FRAME_HEADER_SIZE 12
#define AIRLOCK_FRAME_MAX_PAYLOAD (64u * 1024u)
#define AIRLOCK_FRAME_MAX_SIZE (AIRLOCK_FRAME_HEADER_SIZE + AIRLOCK_FRAME_MAX_PAYLOAD)

/* Name of the virtio-serial port the agent looks for in /sys/class/virtio-ports. */
#define AIRLOCK_PORT_NAME_LITERAL "org.airlock.agent.0"
#define AIRLOCK_PORT_NAME AIRLOCK_PORT_NAME_LITERAL

/* The same byte stream over vsock (Firecracker, or QEMU with vhost-vsock):
 * the agent listens on this port of its CID; the host connects (through
 * Firecracker's hybrid vsock unix socket: "CONNECT 1024\n" -> "OK <n>\n").
 * One host connection at a time; a new one replaces the one before (a
 * snapshot resets every vsock connection, and the host then reconnects). */
#define AIRLOCK_VSOCK_PORT 1024
/* Every guest has this CID: each VM has its own vsock device, so CIDs never
 * meet (vhost-vsock hosts give each VM its own CID instead). */
#define AIRLOCK_VSOCK_GUEST_CID 3

/* The network plan, the same in every sandbox (each has its own network
 * namespace, so addresses never clash and clones need no renumbering). The
 * agent configures eth0 with it at boot; airlockd gives tap0 the gateway
 * address and binds the egress listeners there. The gateway's fixed MAC
 * keeps the guest's ARP cache valid across snapshot/restore into a new
 * namespace. The guest's MAC is each VM's own (02 and five random bytes,
 * drawn with its namespace: QEMU's command line on a cold boot, THAW's
 * "mac" on a restore); AIRLOCK_NET_GUEST_MAC is only what guests of
 * sandboxes from before that have. */
#define AIRLOCK_NET_GUEST_ADDR "10.0.2.15"
#define AIRLOCK_NET_GATEWAY "10.0.2.2"
#define AIRLOCK_NET_PREFIX_LEN 24
#define AIRLOCK_NET_NETMASK "255.255.255.0"
#define AIRLOCK_NET_DNS AIRLOCK_NET_GATEWAY
#define AIRLOCK_NET_GUEST_MAC "02:a1:0c:00:02:0f"
#define AIRLOCK_NET_GATEWAY_MAC_BYTES                                                                                  \
	{                                                                                                              \
		0x02, 0xa1, 0x0c, 0x00, 0x02, 0x02                                                                     \
	}
#define AIRLOCK_NET_TAP "tap0"
#define AIRLOCK_NET_EGRESS_PORT 15001 /* TCP from the guest is redirected here */
#define AIRLOCK_NET_DNS_PORT 53

/*
 * Bytes of STDIN the host may have in flight per stream before the agent
 * returns CREDIT. Keeps one exec's unread stdin from filling the agent's
 * memory or stalling the channel for other streams.
 */
#define AIRLOCK_STDIN_WINDOW (256u * 1024u)

/*
 * Bytes of output (STDOUT + STDERR, or FILE_DATA of a FILE_READ / FILE_OP
 * list) the agent may send on a stream before the host returns CREDIT. This
 * is the back-pressure that keeps a flooding guest from growing the daemon's
 * memory: when a reader is slow, the agent stops reading that process's
 * pipes (the process blocks), and no other stream is affected.
 */
#define AIRLOCK_OUTPUT_WINDOW (1024u * 1024u)

/*
 * Directory watches (WATCH): inotify watches in the whole guest (one per
 * watched directory, over every WATCH stream), watch streams at once, events
 * a watch keeps while the host has not credited them (past that they are
 * counted as "lost"), and events in one WATCH_EVENTS frame.
 */
#define AIRLOCK_WATCH_WATCHES_MAX 8192
#define AIRLOCK_WATCH_STREAMS_MAX 32
#define AIRLOCK_WATCH_QUEUE_MAX 4096
#define AIRLOCK_WATCH_FRAME_EVENTS_MAX 1024

enum airlock_frame_type {
	/* guest -> host, stream 0: {"proto":1,"agent":"VERSION","generation":N,
	 * "boot_id":"HEX","kernel":"RELEASE"}. Sent when the agent opens the
	 * port and in answer to a host HELLO. host -> guest, stream 0: {} asks
	 * the agent to say hello again (re-attach). */
	AIRLOCK_FRAME_HELLO = 1,
	/* host -> guest: start a process on a new stream.
	 * {"argv":["sh","-c","..."], "env":["K=V",...], "cwd":"/", "uid":0,
	 *  "gid":0, "timeout_ms":0 (0 = none), "stdin":true|false,
	 *  "pty":{"rows":24,"cols":80}}
	 * If "stdin" is false the process gets /dev/null. With "pty" the process
	 * gets a new PTY as its controlling terminal and stdin/stdout/stderr;
	 * its output comes as STDOUT, STDIN goes to the PTY (so ^C is a byte
	 * that the line discipline turns into SIGINT), RESIZE sets the window. */
	AIRLOCK_FRAME_EXEC = 2,
	/* host -> guest: stdin bytes for a stream; a zero-length payload is EOF. */
	AIRLOCK_FRAME_STDIN = 3,
	/* guest -> host: output of a stream's process. */
	AIRLOCK_FRAME_STDOUT = 4,
	AIRLOCK_FRAME_STDERR = 5,
	/* guest -> host: the process ended; last frame of the stream.
	 * {"exit_code":N} or {"signal":N}, plus "timed_out":true when the agent
	 * killed it for its timeout. Sent only after all STDOUT/STDERR. */
	AIRLOCK_FRAME_EXIT = 6,
	/* guest -> host: an operation on a stream failed; last frame of the stream.
	 * {"code":"enoent","errno":2,"message":"..."} */
	AIRLOCK_FRAME_ERROR = 7,
	/* host -> guest: {"path":"/abs","mode":420} then FILE_DATA frames, then a
	 * zero-length FILE_DATA; the agent answers OK {"size":N} or ERROR. */
	AIRLOCK_FRAME_FILE_WRITE = 8,
	/* host -> guest: {"path":"/abs"}; the agent answers FILE_DATA frames
	 * (within AIRLOCK_OUTPUT_WINDOW) and a zero-length FILE_DATA, or ERROR.
	 * A FILE_WRITE's FILE_DATA counts against AIRLOCK_STDIN_WINDOW and is
	 * credited as it reaches the disk. */
	AIRLOCK_FRAME_FILE_READ = 9,
	AIRLOCK_FRAME_FILE_DATA = 10,
	/* guest -> host: an operation succeeded; last frame of the stream. */
	AIRLOCK_FRAME_OK = 11,
	/* host -> guest, stream 0: sync and power off. */
	AIRLOCK_FRAME_SHUTDOWN = 12,
	/* host -> guest: {"signal":N} to a stream's process group. On a
	 * FILE_WRITE stream: cancel the upload (temp file removed, ERROR
	 * "ecanceled" ends the stream). */
	AIRLOCK_FRAME_SIGNAL = 13,
	/* u32 big-endian byte count.
	 * guest -> host: bytes of STDIN (or FILE_DATA of a FILE_WRITE) consumed
	 * on this stream (AIRLOCK_STDIN_WINDOW).
	 * host -> guest: bytes of output the host consumed on this stream
	 * (AIRLOCK_OUTPUT_WINDOW). */
	AIRLOCK_FRAME_CREDIT = 14,
	/* host -> guest: {"rows":N,"cols":N} window size of a stream's PTY. */
	AIRLOCK_FRAME_RESIZE = 15,
	/* host -> guest: a filesystem operation on a new stream; the agent answers
	 * OK (payload below) or ERROR.
	 *   {"op":"stat","path":P}            OK {"name","type","size","mode","uid","gid","mtime_ms","target"?}
	 *   {"op":"list","path":P}            FILE_DATA frames, each a JSON object {"entries":[stat objects]},
	 *                                     then OK {"count":N}
	 *   {"op":"mkdir","path":P,"parents":bool,"mode":N}   OK {}
	 *   {"op":"remove","path":P,"recursive":bool}        OK {}
	 *   {"op":"rename","path":P,"to":Q}                   OK {}
	 * "type" is "file", "dir", "symlink" or "other"; stat does not follow a
	 * final symlink ("target" is its target). */
	AIRLOCK_FRAME_FILE_OP = 16,
	/* host -> guest: {} on a new stream; OK {"cpu_usage_usec":N (since boot, all
	 * CPUs), "cpus":N, "mem_total_kib":N, "mem_available_kib":N,
	 * "disk_total_bytes":N, "disk_used_bytes":N (root filesystem),
	 * "uptime_ms":N, "processes":N}. */
	AIRLOCK_FRAME_METRICS = 17,
	/* host -> guest, on a new stream: {} before a snapshot. The agent stops
	 * every guest process but itself (SIGSTOP to all), syncs filesystems, and
	 * answers OK {"stopped":N}. Nothing but the agent runs until THAW. */
	AIRLOCK_FRAME_FREEZE = 18,
	/* host -> guest, on a new stream, after a snapshot (on the original) or a
	 * restore (on each clone), before anything else:
	 * {"generation":N, "entropy":"<base64, >= 32 bytes>", "time_ms":EPOCH_MS,
	 *  "sandbox_id":"sb-...", "hostname":"...", "orphan_streams":bool,
	 *  "mac":"02:xx:xx:xx:xx:xx"}
	 * "mac" is exactly six two-digit hex groups joined by ':', a locally
	 * administered unicast address (first octet & 3 == 2); absent (a host
	 * from before): the guest keeps the one it has. The agent checks every
	 * field before it changes anything (ERROR einval). It mixes the entropy
	 * into the kernel RNG and reseeds it (RNDADDENTROPY + RNDRESEEDCRNG),
	 * gives eth0 the MAC (SIOCSIFHWADDR with the link up; no eth0 or a
	 * refusal: ERROR, and the host fails the start), sets CLOCK_REALTIME,
	 * sets the hostname,
	 * writes /run/airlock/{generation,sandbox_id}, and with orphan_streams
	 * forgets every stream it had (their processes keep running; their
	 * output is read and dropped) — then SIGCONTs the processes it stopped and
	 * answers OK {"generation":N}. The HELLOs it sends afterwards carry N. */
	AIRLOCK_FRAME_THAW = 19,
	/* host -> guest, on a new stream: {"path":"/abs","recursive":bool,"entries":bool}
	 * watches a directory with inotify (recursive: every subdirectory too,
	 * also those created later). The agent answers WATCH_EVENTS frames (the
	 * first, {"started":true,"watches":N,"events":[]}, once the watches are
	 * in place), or ERROR (enoent, enotdir, emfile...). SIGNAL (any payload)
	 * cancels the watch: OK {"reason":"cancelled"} ends the stream; so does
	 * OK {"reason":"removed"} when the watched directory goes away. */
	AIRLOCK_FRAME_WATCH = 20,
	/* guest -> host, on a WATCH stream, within AIRLOCK_OUTPUT_WINDOW (the
	 * host credits it like output): a JSON object
	 * {"events":[{"name":"a/b","op":"create"|"write"|"remove"|"rename"|"chmod"}, ...],
	 *  "lost":N, "unwatched":N, "started":true, "watches":N}
	 * "name" is relative to the watched directory, never empty, never
	 * absolute, without "." or ".." components. "lost" (absent = 0) counts
	 * events the agent could not keep (the kernel's queue overflowed:
	 * counted as 1, or AIRLOCK_WATCH_QUEUE_MAX events waited for credit);
	 * "unwatched" counts directories left unwatched because the sandbox
	 * reached AIRLOCK_WATCH_WATCHES_MAX. Both mean events were missed.
	 * With "entries", a create, write or chmod event carries "entry": the
	 * FILE_OP stat object of its path when it was sent (absent if gone). */
	AIRLOCK_FRAME_WATCH_EVENTS = 21,
	AIRLOCK_FRAME_TYPE_MAX = 21,
};

struct airlock_frame_header {
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint32_t stream;
	uint32_t length;
};

#endif
