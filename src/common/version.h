/* SPDX-License-Identifier: Apache-2.0 */
#ifndef AIRLOCK_VERSION_H
#define AIRLOCK_VERSION_H
#define AIRLOCK_VERSION "0.1.0"
#endif
