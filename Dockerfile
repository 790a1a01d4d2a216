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
CMD ["sh", "-c", "python manage.py migrate --noinput && gunicorn config.asgi:application --config config/gunicorn.conf.py --bind 0.0.0.0:8000"]
