"""Weather history: the days attempts need, from the ERA5 archive or Open-Meteo."""

from pipeline.weather.load import load_weather
from pipeline.weather.report import PeakWeather, WeatherReport

__all__ = ["PeakWeather", "WeatherReport", "load_weather"]
