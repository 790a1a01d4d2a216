# Memories under gunicorn, as a non-root user. Needs DATABASE_URL (see docker-compose.yml).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
    && useradd --create-home --uid 10001 memories \
    && chown -R memories /app
USER memories
EXPOSE 8000
# config.server checks WEB_CONCURRENCY / WEB_CPU_AFFINITY first (one line instead of gunicorn's traceback);
# a blank WEB_CONCURRENCY (common in compose files) means the default.
CMD ["sh", "-c", "[ -n \"$(echo $WEB_CONCURRENCY)\" ] || unset WEB_CONCURRENCY; python -m config.server && python manage.py migrate --noinput && exec gunicorn config.asgi:application --config config/gunicorn.conf.py --bind 0.0.0.0:8000"]
