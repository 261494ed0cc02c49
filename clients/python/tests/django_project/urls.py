from django.urls import path

from . import views

urlpatterns = [
    path("api/hello", views.Hello.as_view()),
    path("api/upload", views.Upload.as_view()),
    path("api/flood/native", views.NativeFloodView.as_view()),
    path("api/flood/cache", views.CacheFloodView.as_view()),
    path("ip", views.by_ip),
    path("user-or-ip", views.by_user_or_ip),
    path("user", views.by_user),
    path("header", views.by_header),
    path("callable", views.by_callable),
    path("posts-only", views.posts_only),
    path("custom-handler", views.custom_handler),
    path("not-blocking", views.not_blocking),
    path("shared-a", views.shared_a),
    path("shared-b", views.shared_b),
    path("flood", views.flood),
    path("async", views.async_view),
]
