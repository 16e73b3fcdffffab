/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's log: one line per event on stderr (journald adds time stamps
 * under systemd; we add our own for plain files). */
#ifndef AIRLOCK_LOG_H
#define AIRLOCK_LOG_H

void log_line(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_info(...) log_line("info", __VA_ARGS__)
#define log_error(...) log_line("error", __VA_ARGS__)

#endif
