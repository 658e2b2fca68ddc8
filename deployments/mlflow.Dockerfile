# MLflow server with the PostgreSQL driver and the S3 client its backend and artifact store need,
# and Flask-WTF for its basic-auth app (mlflow[auth]).
FROM ghcr.io/mlflow/mlflow:v3.17.2
RUN pip install --no-cache-dir psycopg2-binary==2.9.10 boto3==1.38.0 Flask-WTF==1.3.0
