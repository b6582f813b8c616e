# icegate as a container image: a static-ish release binary on a slim base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p icegate

FROM debian:bookworm-slim
RUN useradd --system --home /var/lib/icegate --create-home icegate
COPY --from=build /src/target/release/icegate /usr/local/bin/icegate
USER icegate
WORKDIR /var/lib/icegate
EXPOSE 8181
ENTRYPOINT ["icegate"]
CMD ["serve"]
