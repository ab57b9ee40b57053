"""Sealing per-project secrets (an SMR API key override) at rest with a key derived from SECRET_KEY.

A sealed value is stored in the project's settings; it is revealed only to build a connector and is
never rendered in a page or an API answer.
"""

import base64
import hashlib

from django.conf import settings
from nacl.secret import SecretBox


def _box() -> SecretBox:
    return SecretBox(hashlib.sha256(b"smrweb-sealed-settings:" + settings.SECRET_KEY.encode()).digest())


def seal(value: str) -> str:
    return base64.b64encode(_box().encrypt(value.encode())).decode()


def reveal(sealed: str) -> str:
    return _box().decrypt(base64.b64decode(sealed)).decode()
