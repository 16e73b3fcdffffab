# SPDX-License-Identifier: Apache-2.0
"""The base of the SDK's objects that wrap one API record (Sandbox, Process,
Snapshot): the record's fields read as attributes."""


class Record:
    """self.data is the API's JSON object; record.id is record.data["id"]."""

    def __getattr__(self, name):
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None
