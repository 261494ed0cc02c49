"""Settings of the test project: Django REST framework with the package's throttles in place of DRF's."""

SECRET_KEY = "redis-throttle tests"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The one-line switch: DRF's "rest_framework.throttling.AnonRateThrottle" and "...UserRateThrottle" become
# these; the rates are DRF's own strings.
REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": [
        "redis_throttle.django.ThrottleAnonRateThrottle",
        "redis_throttle.django.ThrottleUserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"anon": "3/min", "user": "5/min", "uploads": "2/hour", "flood": "10/min"},
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

# REDIS_THROTTLE_CONNECTION: set by each test to its server ("redis://127.0.0.1:PORT/0", a client, or
# "cache:default").
