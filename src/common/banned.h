/* SPDX-License-Identifier: Apache-2.0 */
/* Functions with a safer replacement in this tree. Included by util.h, so everywhere. */
#ifndef AIRLOCK_BANNED_H
#define AIRLOCK_BANNED_H

#define BANNED(func) sorry_##func##_is_banned_in_airlock

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef strncat
#define strncat(x, y, n) BANNED(strncat)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef strtok
#define strtok(x, y) BANNED(strtok)
#undef atoi
#define atoi(x) BANNED(atoi)
#undef atol
#define atol(x) BANNED(atol)
#undef gets
#define gets(x) BANNED(gets)

#endif
