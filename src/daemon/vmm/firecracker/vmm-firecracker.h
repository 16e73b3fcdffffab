/* SPDX-License-Identifier: Apache-2.0 */
/* The Firecracker backend's ops (vmm.h). The daemon reaches them through the
 * backend table (vmm-select.c); tests name them here. */
#ifndef AIRLOCK_VMM_FIRECRACKER_H
#define AIRLOCK_VMM_FIRECRACKER_H

#include "vmm.h"

extern const struct vmm_ops vmm_firecracker_ops;

#endif
