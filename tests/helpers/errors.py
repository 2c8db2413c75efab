"""Capturing what a call raises, for the tests that require tf_embedding to raise exactly what
stock TF raises (same exception type, same message)."""


def error_of(factory, *args, **kwargs):
    """The (type, message) a constructor raises, or None."""
    try:
        factory(*args, **kwargs)
    except Exception as error:  # pylint: disable=broad-except
        return type(error), str(error)
    return None
