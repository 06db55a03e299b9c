"""The application icon, from the packaged resources."""

from __future__ import annotations

from importlib import resources

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QSize
from PySide6.QtGui import QIcon, QImageReader, QPixmap

ICON_RESOURCE = "icons/mtpstudio.svg"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256)


def app_icon() -> QIcon:
    """The application icon (resources/icons/mtpstudio.svg), rendered at the usual sizes.

    The SVG is read through importlib.resources (works from a wheel or a zip too) and
    rendered now at each size, so the icon needs no file on disk afterwards.
    """
    data = QByteArray(resources.files("mtpstudio.resources").joinpath(ICON_RESOURCE).read_bytes())
    icon = QIcon()
    for size in ICON_SIZES:
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.ReadOnly)
        reader = QImageReader(buffer, QByteArray(b"svg"))
        reader.setScaledSize(QSize(size, size))
        image = reader.read()
        if not image.isNull():
            icon.addPixmap(QPixmap.fromImage(image))
    return icon
