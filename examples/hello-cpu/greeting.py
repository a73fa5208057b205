"""A sibling module: imported by hello.py from the capsule root."""


def greet(text):
    return "*** %s ***" % text
