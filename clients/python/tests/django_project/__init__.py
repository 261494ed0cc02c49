"""A small Django project for the tests of redis_throttle.django: settings with Django REST framework and
the package's throttles, DRF views (the default classes, a scoped view, the flood views) and plain Django
views under @throttle. The tests point REDIS_THROTTLE_CONNECTION (or CACHES) at their own server."""
