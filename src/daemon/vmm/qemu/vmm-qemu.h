/* SPDX-License-Identifier: Apache-2.0 */
/* The QEMU backend's ops (vmm.h). The daemon reaches them through the
 * backend table (vmm-select.c); tests name them here. */
#ifndef AIRLOCK_VMM_QEMU_H
#define AIRLOCK_VMM_QEMU_H

#include "vmm.h"

/* Its files in the VMM's directory. */
#define QEMU_DISK "disk.qcow2"       /* the qcow2 overlay over the template */
#define QEMU_CHANNEL_SOCK "ctl.sock" /* the guest channel (virtio-serial) */
#define QEMU_CONSOLE_SOCK "con.sock" /* the serial console */

extern const struct vmm_ops vmm_qemu_ops;

#endif
