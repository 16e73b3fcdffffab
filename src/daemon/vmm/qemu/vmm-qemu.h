/* SPDX-License-Identifier: Apache-2.0 */
/* The QEMU backend's ops (vmm.h). The daemon reaches them through the
 * backend table (vmm-select.c); tests name them here. */
#ifndef AIRLOCK_VMM_QEMU_H
#define AIRLOCK_VMM_QEMU_H

#include "vmm.h"

extern const struct vmm_ops vmm_qemu_ops;

#endif
