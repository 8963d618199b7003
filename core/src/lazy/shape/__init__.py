"""Movement ops as pure data: `View` (one strided, masked window) and `ShapeTracker` (a stack of views)."""

from lazy.shape.shapetracker import ShapeTracker
from lazy.shape.view import View, strides_for_shape

__all__ = ["ShapeTracker", "View", "strides_for_shape"]
