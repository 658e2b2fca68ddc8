"""Serving: the registered pyfunc and scoring planned attempts with the champion."""
