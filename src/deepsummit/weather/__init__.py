"""Weather history: the days attempts need, from the ERA5 archive or Open-Meteo."""

from deepsummit.weather.load import load_weather
from deepsummit.weather.report import PeakWeather, WeatherReport

__all__ = ["PeakWeather", "WeatherReport", "load_weather"]
