"""Method plugins. Every public module here registers one method with ``@register_method``."""
from bench.registry import import_submodules
from methods.base import METHODS, Method, MethodContext, register_method

import_submodules(__name__)

__all__ = ["METHODS", "Method", "MethodContext", "register_method"]
