"""Weather history: the days attempts need, from the ERA5 archive or Open-Meteo."""

from deepsummit.weather.report import PeakWeather, WeatherReport
from deepsummit.weather.stage import load_weather

__all__ = ["PeakWeather", "WeatherReport", "load_weather"]
