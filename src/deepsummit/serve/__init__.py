"""Serving: the registered pyfunc, the champion's answer for planned attempts (inference,
scoring, predict) and the push-day outlook."""
