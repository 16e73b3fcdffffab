/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What airlock-jailer writes on the VMM's stderr that airlockd reads
 * (docs/jailer.md, "Exit status").
 *
 * A refused step: one line "airlock-jailer: STEP: why", status 1.
 *
 * With --new-pid-ns the VMM is pid 1 of its own pid namespace, a child of
 * the jailer's supervising parent: when it is killed by a signal the parent
 * says so in one line before dying of the same signal,
 *
 *   airlock-jailer[supervisor]: the VMM (pid PID) was killed by signal N (SIGNAME)
 *
 * PID is the VMM's pid in the host's pid namespace, which the kernel's audit
 * record of a seccomp kill names (type=1326 ... pid=PID ... syscall=NR).
 *
 * With --lease, a lease no airlockd renews in time makes the parent stop the
 * VMM (then the line above, signal 9), after one line
 *
 *   airlock-jailer[supervisor]: WHY: no airlockd will re-attach to the VMM (pid PID); stopping it
 *
 * The VMM can write to this stream too: airlockd decides nothing from it.
 * How the VMM ended, for an airlockd that is not the jailer's parent, is the
 * --exit-file (root's, out of the jail): one line "status N" or "signal N".
 */
#ifndef AIRLOCK_PROTO_JAILER_H
#define AIRLOCK_PROTO_JAILER_H

#define AIRLOCK_JAILER_REFUSAL_PREFIX "airlock-jailer: "
#define AIRLOCK_JAILER_SUPERVISOR_PREFIX "airlock-jailer[supervisor]: "

#endif
