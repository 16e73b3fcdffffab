/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The network namespace of a sandbox (DESIGN.md, "Network"): tap0 for the
 * guest with the gateway address, no other interface and no route out,
 * IPv6 disabled, and nftables rules that redirect the guest's TCP to the
 * egress listener and its DNS (UDP/TCP 53, any destination) to the DNS
 * listeners, and drop and count everything else. The three listening
 * sockets are created inside the namespace here and handed to
 * airlock-egress (egress-supervisor.c); a connection's sandbox is the
 * listener it arrived on.
 *
 * Nothing is named in /run/netns: the namespace lives as long as something
 * holds it (the fd here, the VMM that joined it, the listeners), so a
 * crash cannot leave a named namespace behind, and deleting a sandbox
 * leaves nothing once its VMM and listeners are gone.
 */
#ifndef AIRLOCK_NETNS_H
#define AIRLOCK_NETNS_H

#include <stdint.h>
#include <sys/types.h>

#include "error.h"

enum {
	NETNS_LISTEN_TCP = 0, /* AIRLOCK_NET_GATEWAY:AIRLOCK_NET_EGRESS_PORT, stream */
	NETNS_LISTEN_DNS_UDP, /* AIRLOCK_NET_GATEWAY:53, datagram */
	NETNS_LISTEN_DNS_TCP, /* AIRLOCK_NET_GATEWAY:53, stream */
	NETNS_LISTEN_COUNT,
};

struct netns {
	int ns_fd; /* the namespace (for setns) */
	int listen_fds[NETNS_LISTEN_COUNT];
	/* The guest MAC its rules accept: drawn with the namespace (02 and five
	 * random bytes), so every VM's is its own; "" after netns_attach (the
	 * sandbox's record knows it). */
	char guest_mac[18];
};

#define NETNS_INIT                                                                                                     \
	{                                                                                                              \
		.ns_fd = -1, .listen_fds = { -1, -1, -1 }                                                              \
	}

/* A namespace fully set up (tap owned by tap_owner's uid and gid,
 * addresses, sysctls, nftables for ret->guest_mac, listeners): from the pool when it has one
 * ready (its tap then given to tap_owner), else a new one. On any failure
 * nothing is left and the error says which step failed: the sandbox must
 * not start. */
int netns_take(uid_t tap_owner, struct netns *ret, struct al_error *err);

/* Keeps `size` namespaces ready (a thread makes them; 0: no pool). A pool
 * that cannot make one logs why and retries with a growing pause; creates
 * meanwhile make their own (and fail as without a pool). */
#define NETNS_POOL_MAX 64
#define NETNS_POOL_DEFAULT 4
int netns_pool_start(unsigned size, struct al_error *err);
/* Stops the thread and frees the namespaces still ready. */
void netns_pool_stop(void);

/* The namespace the process pid (a running VMM) is in, with new listeners
 * (after a daemon restart; the rules are still in place and are checked). */
int netns_attach(pid_t pid, struct netns *ret, struct al_error *err);

/* A new TCP socket (non-blocking, CLOEXEC) in the namespace ns_fd, marked
 * NETNS_PORT_MARK: the namespace's rules let it connect to the guest (a
 * sandbox's port reached from outside); only such sockets may. */
#define NETNS_PORT_MARK 0x41a1u
int netns_guest_socket(int ns_fd, int *ret_fd, struct al_error *err);

/* Closes what is still held (listener fds may have been taken). */
void netns_release(struct netns *n);

/* The nft binary: $AIRLOCK_NFT, else the usual places; NULL if none. */
const char *netns_nft_path(void);

/* The counter of packets the rules dropped in the namespace. */
int netns_dropped(int ns_fd, uint64_t *ret_packets, uint64_t *ret_bytes, struct al_error *err);

#endif
