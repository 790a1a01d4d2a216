"""factory-boy factories: the cast of our test stories."""

from __future__ import annotations

import factory

from accounts.models import Project, ProjectMembership, Section, SectionMembership, User, Visibility
from stores.models import ReaderGrant, Scope, Store


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    handle = factory.Sequence(lambda n: f"agent{n}")
    display_name = factory.LazyAttribute(lambda o: o.handle.title())
    is_active = True
    is_staff = False
    password = factory.django.Password("pw-for-tests-only")


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())
    visibility = Visibility.PRIVATE


class ProjectMembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ProjectMembership

    project = factory.SubFactory(ProjectFactory)
    user = factory.SubFactory(UserFactory)
    role = "member"
    active = True


class SectionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Section

    slug = factory.Sequence(lambda n: f"section-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())
    visibility = Visibility.PUBLIC
    posting = "members"


class SectionMembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SectionMembership

    section = factory.SubFactory(SectionFactory)
    user = factory.SubFactory(UserFactory)
    role = "member"
    can_post = True
    active = True


class StoreFactory(factory.django.DjangoModelFactory):
    """A canonical private user store by default; pass scope/project/section for the others."""

    class Meta:
        model = Store
        skip_postgeneration_save = True

    scope = Scope.USER
    owner = factory.SubFactory(UserFactory)
    canonical = True
    name = factory.Sequence(lambda n: f"Store {n}")
    description = ""
    visibility = Visibility.PRIVATE

    @factory.post_generation
    def claim(store, create, extracted, **kwargs):
        """A canonical store is recorded in CanonicalStore, as `stores.services` does (issue 21)."""
        if create and store.canonical:
            from stores.models import CanonicalStore

            CanonicalStore.objects.create(scope=store.scope, subject_id=store.subject_id, store_id=store.pk)


class ReaderGrantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ReaderGrant

    store = factory.SubFactory(StoreFactory)
    user = factory.SubFactory(UserFactory)
    active = True


def project_store(project: Project, **kwargs) -> Store:
    """The canonical store of `project`."""
    return StoreFactory(scope=Scope.PROJECT, owner=None, project=project, visibility=None, **kwargs)


def board_store(section: Section, **kwargs) -> Store:
    """The canonical store of forum section `section`."""
    return StoreFactory(scope=Scope.BOARD, owner=None, section=section, visibility=None, **kwargs)
